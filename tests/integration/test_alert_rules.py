"""The shipped alerts fire on the series that mean trouble, and only on them, as the
real ``promtool test rules`` (Prometheus' rule unit tests, from the dev cluster's
Prometheus build) evaluates the committed PrometheusRule over given series."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from jupyterhub_gpu.bundle.files import PROMETHEUS_RULES
from jupyterhub_gpu.devcluster import build

REPO = Path(__file__).resolve().parents[2]
CULLER_ALERT = "JupyterhubGpuCullerWithoutGpuData"
FALLBACKS = "jupyterhub_gpu_cull_gpu_data_fallbacks_total"


def _rule(name: str) -> tuple[list[dict], dict]:
    """The committed groups, and the alert rule ``name``."""
    doc = yaml.safe_load((REPO / PROMETHEUS_RULES).read_text().split("\n", 2)[2])
    groups = doc["spec"]["groups"]
    (rule,) = [r for g in groups for r in g["rules"] if r.get("alert") == name]
    return groups, rule


def _promtool_test(tmp_path: Path, groups: list[dict], tests: list[dict]) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}))
    out = subprocess.run([str(build.binaries()["promtool"]), "test", "rules", "tests.yaml"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_culler_alert_fires_when_gpu_idle_decisions_lack_prometheus(tmp_path):
    """The culler counts each GPU-idle decision that fell back to the activity rules
    because Prometheus did not answer (``state="unavailable"``,
    jupyterhub_gpu/cull/metrics.py). While that count grows, for 15 minutes, the alert
    fires; a pod that merely has no GPU series (``state="missing"``) does not make it
    fire, nor does a count that stopped growing."""
    groups, rule = _rule(CULLER_ALERT)
    firing = [{"exp_labels": dict(rule["labels"]), "exp_annotations": rule["annotations"]}]
    tests = [{
        "interval": "1m",
        "input_series": [
            {"series": f'{FALLBACKS}{{profile="t4-shared", state="unavailable"}}',
             "values": "0+1x40 40x40"},  # Prometheus gone 40 minutes, then back
            {"series": f'{FALLBACKS}{{profile="a100-mig-3g", state="missing"}}',
             "values": "0+1x80"},
        ],
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": CULLER_ALERT, "exp_alerts": []},
            {"eval_time": "35m", "alertname": CULLER_ALERT, "exp_alerts": firing},
            {"eval_time": "75m", "alertname": CULLER_ALERT, "exp_alerts": []},
        ]}]
    _promtool_test(tmp_path, groups, tests)
