"""The Prometheus Operator's inputs and the adaptation of its generated config
(:mod:`jupyterhub_gpu.devcluster.promoperator`); the operator itself runs in the cluster
tier (tests/integration/test_prometheus_operator.py).

Upstream read for these: NVIDIA/gpu-operator v26.7.0 ``controllers/object_controls.go``
(``ServiceMonitor``, ``applyServiceMonitorCustomEdits``), its
``assets/state-dcgm-exporter/0500_service_monitor.yaml`` and
``deployments/gpu-operator/values.yaml``; prometheus-community/helm-charts
``charts/kube-prometheus-stack/templates/prometheus/prometheus.yaml``.
"""

from __future__ import annotations

import base64
import gzip
import re
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.devcluster import build, promoperator as po

REPO = Path(__file__).resolve().parents[2]


def test_the_gpu_operators_service_monitor_with_the_bundles_values_is_selected():
    """The shipped GPU Operator values label ``dcgmExporter.serviceMonitor`` with
    kube-prometheus-stack's release ([aks] #28 item 5): the operator creates its
    ServiceMonitor (enabled by default in v26.7.0) labelled ``app`` and ``release``,
    which kube-prometheus-stack's default selector takes (unlabelled, it did not)."""
    values = yaml.safe_load((REPO / "config" / "gpu-operator-values.yaml").read_text())
    monitor = po.dcgm_service_monitor(values)
    assert monitor["metadata"] == {"name": "nvidia-dcgm-exporter", "namespace": "gpu-operator",
                                   "labels": {"app": "nvidia-dcgm-exporter",
                                              "release": "kube-prometheus-stack"}}
    assert monitor["spec"]["endpoints"] == [
        {"port": "gpu-metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s",
         "honorLabels": False, "relabelings": []}]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-operator"]}
    assert monitor["spec"]["selector"] == {"matchLabels": {"app": "nvidia-dcgm-exporter"}}
    selector = po.prometheus()["spec"]["serviceMonitorSelector"]["matchLabels"]
    assert selector.items() <= monitor["metadata"]["labels"].items()


def test_the_gpu_operators_custom_edits_and_switch_are_applied():
    """``applyServiceMonitorCustomEdits``: additional labels join ``app``; interval,
    timeout, honorLabels and relabelings go to the first endpoint; ``enabled: false``
    means no ServiceMonitor (the operator deletes it)."""
    relabel = {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"}
    monitor = po.dcgm_service_monitor({"dcgmExporter": {"serviceMonitor": {
        "additionalLabels": {"release": "kps"}, "interval": "30s", "honorLabels": True,
        "relabelings": [relabel]}}}, namespace="gpu")
    assert monitor["metadata"]["labels"] == {"app": "nvidia-dcgm-exporter", "release": "kps"}
    assert monitor["metadata"]["namespace"] == "gpu"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["interval"], endpoint["scrapeTimeout"], endpoint["honorLabels"]) == (
        "30s", "10s", True)
    assert endpoint["relabelings"] == [relabel]
    assert po.dcgm_service_monitor({"dcgmExporter": {"serviceMonitor": {"enabled": False}}}) is None


def test_the_prometheus_object_selects_by_release_everywhere_as_the_chart_defaults_do():
    spec = po.prometheus("rel")["spec"]
    for kind in ("serviceMonitor", "podMonitor", "probe", "rule", "scrapeConfig"):
        assert spec[f"{kind}Selector"] == {"matchLabels": {"release": "rel"}}
        assert spec[f"{kind}NamespaceSelector"] == {}
    assert spec["version"] == "v3.16.0" == po.prometheus_release("v0.316.0")


def test_only_the_prometheus_side_crds_are_installed(tmp_path):
    names = ["alertmanagerconfigs", "alertmanagers", "podmonitors", "probes",
             "prometheusagents", "prometheuses", "prometheusrules", "scrapeconfigs",
             "servicemonitors", "thanosrulers"]
    for name in names:
        (tmp_path / f"monitoring.coreos.com_{name}.yaml").write_text(
            f"metadata: {{name: {name}.monitoring.coreos.com}}\n")
    kept = {c["metadata"]["name"].split(".")[0] for c in po.prometheus_crds(tmp_path)}
    assert kept == {"podmonitors", "probes", "prometheuses", "prometheusrules",
                    "scrapeconfigs", "servicemonitors"}


def _mounts(tmp_path: Path) -> po.Mounts:
    return po.Mounts(kubeconfig=tmp_path / "kc", token=tmp_path / "token", ca=tmp_path / "ca",
                     rules_dir=tmp_path / "rules", sd_dir=tmp_path / "sd",
                     pod_name="prometheus-x-0")


def test_adapt_replaces_only_the_pods_mounts(tmp_path):
    sa = po.SA_MOUNT
    config = {
        "global": {"external_labels": {"prometheus_replica": "$(POD_NAME)"}},
        "rule_files": ["/etc/prometheus/rules/prometheus-x-rulefiles-0/*.yaml"],
        "scrape_configs": [
            {"job_name": "serviceMonitor/ns/a/0", "honor_labels": False,
             "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": ["ns"]}}],
             "authorization": {"credentials_file": sa + "token"},
             "tls_config": {"ca_file": sa + "ca.crt"},
             "relabel_configs": [{"action": "keep", "regex": "$(SHARD);|.+;.+"}]},
            {"job_name": "explicit", "kubernetes_sd_configs": [
                {"role": "pod", "api_server": "https://elsewhere"}]}]}
    adapted = po.adapt(config, _mounts(tmp_path)).config
    assert adapted["global"]["external_labels"] == {"prometheus_replica": "prometheus-x-0"}
    assert adapted["rule_files"] == [str(tmp_path / "rules/prometheus-x-rulefiles-0/*.yaml")]
    job, explicit = adapted["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {
        "names": ["ns"]}, "kubeconfig_file": str(tmp_path / "kc")}]
    assert job["authorization"] == {"credentials_file": str(tmp_path / "token")}
    assert job["tls_config"] == {"ca_file": str(tmp_path / "ca")}
    assert job["relabel_configs"] == [{"action": "keep", "regex": "0;|.+;.+"}]
    assert explicit == config["scrape_configs"][1]
    assert config["scrape_configs"][0]["kubernetes_sd_configs"][0].keys() == {"role", "namespaces"}


@pytest.mark.parametrize("path", ["/etc/prometheus/secrets/s/key", "/etc/prometheus/certs/x",
                                  po.SA_MOUNT + "namespace", "$(NODE_NAME)"])
def test_adapt_refuses_a_mounted_file_it_has_no_stand_in_for(tmp_path, path):
    with pytest.raises(po.AdaptError, match=re.escape(path)):
        po.adapt({"scrape_configs": [{"job_name": "j", "tls_config": {"cert_file": path}}]},
                 _mounts(tmp_path))


def test_the_generated_config_and_rule_files_are_read_as_mounted(tmp_path):
    secret = {"data": {po.CONFIG_KEY: base64.b64encode(gzip.compress(b"global: {}\n")).decode()}}
    assert po.generated_config(secret) == b"global: {}\n"
    written = po.write_rule_files([{"metadata": {"name": "cm"}, "data": {"a.yaml": "groups: []"}}],
                                  tmp_path)
    assert written == [tmp_path / "cm" / "a.yaml"] and written[0].read_text() == "groups: []"


def test_the_operator_is_an_opt_in_build():
    """Not in the default build nor in is_built(); an unknown opt-in name is refused."""
    assert "prometheus-operator" not in build.PINS
    assert build.pin("prometheus-operator").package.endswith("/cmd/operator")
    with pytest.raises(build.BuildError, match="no opt-in binary nope; there are: prometheus-operator"):
        build.build(progress=lambda m: None, opt_in=("nope",))


def test_the_endpoints_role_becomes_file_sd_of_its_namespaces(tmp_path):
    """The dev cluster holds no Endpoints: each role-endpoints entry becomes a file_sd
    file with the discovered groups of the namespaces it watches; endpointslice, which
    the dev cluster cannot serve either, is refused."""
    groups = [{"targets": [f"127.0.0.{i}:1"], "labels": {"__meta_kubernetes_namespace": ns}}
              for i, ns in enumerate(("a", "b"), start=1)]
    config = {"scrape_configs": [
        {"job_name": "serviceMonitor/a/m/0",
         "kubernetes_sd_configs": [{"role": "endpoints", "namespaces": {"names": ["a"]}}]},
        {"job_name": "all", "kubernetes_sd_configs": [{"role": "endpoints"}]}]}
    adapted = po.adapt(config, _mounts(tmp_path), groups)
    first, every = adapted.config["scrape_configs"]
    assert "kubernetes_sd_configs" not in first
    assert first["file_sd_configs"] == [{"files": [str(tmp_path / "sd/serviceMonitor_a_m_0.json")],
                                         "refresh_interval": "5s"}]
    assert adapted.sd_files == {"serviceMonitor_a_m_0.json": groups[:1], "all.json": groups}
    with pytest.raises(po.AdaptError, match="endpointslice"):
        po.adapt({"scrape_configs": [{"job_name": "j", "kubernetes_sd_configs": [
            {"role": "endpointslice"}]}]}, _mounts(tmp_path))
