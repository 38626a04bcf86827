"""The admin guide's outputs are true: the commands that run here are run and their
output compared, and the outputs of the cluster steps are checked against the
objects that make them (the spec, the generated Kueue config, Kueue's Workload CRD)."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.contract import QUEUE_LABEL
from jupyterhub_gpu.spec.parse import load_platform

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "admin-guide.md"
CLI = [sys.executable, "-m", "jupyterhub_gpu.cli"]


@dataclass(frozen=True)
class Shown:
    """One ``$ command`` of a ``console`` block and the lines printed under it."""

    section: str
    command: str
    output: list[str]


def shown(text: str) -> list[Shown]:
    out, section = [], ""
    for block in re.finditer(r"^(#+ [^\n]*)$|^```console\n(.*?)^```", text, re.M | re.S):
        if block[1]:
            section = block[1]
            continue
        for m in re.finditer(r"^\$ (.*)\n((?:(?!\$ ).*\n)*)", block[2], re.M):
            out.append(Shown(section, m[1], m[2].splitlines()))
    return out


SHOWN = shown(GUIDE.read_text())


def one(prefix: str) -> Shown:
    (found,) = [s for s in SHOWN if s.command.startswith(prefix)]
    return found


def table(lines: list[str]) -> list[dict[str, str]]:
    """kubectl's table: the columns start where the header's names start."""
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"(?<!\S)\S+(?: [A-Z]\S*)*", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]
    return [{n: line[a:b].strip() for n, a, b in zip(names, starts, [*starts[1:], None])}
            for line in lines[1:]]


@pytest.mark.parametrize("command", [s.command for s in SHOWN
                                     if re.match(r"jupyterhub-gpu (validate|check-bundle)\b",
                                                 s.command)])
def test_the_offline_commands_print_what_the_guide_shows(command):
    result = subprocess.run([*CLI, *command.split()[1:]], cwd=REPO, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == one(command).output


def test_the_guide_shows_the_offline_commands_of_step_2():
    assert {s.command.split()[1] for s in SHOWN if s.section.startswith("## 2.")} == {
        "validate", "check-bundle"}


def test_the_workloads_table_has_kueues_columns_and_the_teams_queue():
    from jupyterhub_gpu.devcluster import build

    crd = build.kueue_crd_dir() / "kueue.x-k8s.io_workloads.yaml"
    if not crd.exists():
        pytest.skip(f"Kueue's CRDs are not built ({crd}): `make build`")
    (version,) = [v for v in yaml.safe_load(crd.read_text())["spec"]["versions"]
                  if v["storage"]]
    columns = [c["name"].upper() for c in version["additionalPrinterColumns"]
               if not c.get("priority")]
    (row,) = table(one("kubectl get workloads").output)
    assert list(row) == ["NAMESPACE", "NAME", *columns]  # kubectl's -A adds NAMESPACE
    queues = {(d["metadata"]["namespace"], d["metadata"]["name"]): d["spec"]["clusterQueue"]
              for d in yaml.safe_load_all((REPO / "config" / "kueue.yaml").read_text())
              if d and d["kind"] == "LocalQueue"}
    assert queues[(row["NAMESPACE"], row["QUEUE"])] == row["RESERVED IN"]
    assert row["NAME"].startswith("pod-jupyter-")  # Kueue's plain-pod Workload


def test_the_nodes_table_shows_each_pools_nvidia_gpu_count():
    platform = load_platform(REPO / "config" / "platform.yaml")
    per_node = {p.name: p.units_per_node for p in platform.pools}
    rows = table(one("kubectl get nodes").output)
    gpu_rows = [r for r in rows if r["GPUS"] != "<none>"]
    assert gpu_rows and all(int(r["GPUS"]) == per_node[r["POOL"]] for r in gpu_rows)
    assert all(r["NAME"].startswith(f"aks-{r['POOL']}-") for r in rows)  # AKS's VMSS names
    text = GUIDE.read_text()
    mig = next(p for p in platform.pools if p.sharing.mode.partitioned)
    assert f"an `{mig.name}` node its MIG\n`{mig.sharing.mig_profile}` instances, " \
           f"{mig.units_per_node})" in text


def test_the_job_table_reads_the_queue_label_a_job_carries():
    shown_job = one("kubectl get jobs")
    assert QUEUE_LABEL.replace(".", "\\.") in shown_job.command
    (row,) = table(shown_job.output)
    submitted = one("jupyterhub-gpu job submit")
    assert submitted.output == [f"{row['NAME']}: queued in {row['QUEUE']}: position 1 of 1"]


def test_helm_template_renders_the_objects_the_guide_counts():
    """The guide's ``helm template`` of step 8 is rendered with the dev cluster's Helm
    and the reference z2jh 4.4.0 chart, in the guide's install order, with the guide's
    example of the admin's own values file (tests/z2jh_chart.py)."""
    from collections import Counter

    from jupyterhub_gpu.devcluster import build
    from tests import z2jh_chart

    helm = build.binaries()["helm"]
    if not helm.exists():
        pytest.skip(f"the dev cluster's Helm is not built ({helm}): `make build`")
    command = one("helm template")
    args = command.command.split(" | ")[0].split()
    assert args[args.index("--namespace") + 1] == z2jh_chart.RELEASE_NAMESPACE
    assert [a for i, a in enumerate(args) if args[i - 1] == "-f"] == z2jh_chart.install_order()
    kinds = Counter(o["kind"] for o in z2jh_chart.helm_template(helm))
    assert command.output == [f"{n:7d} kind: {kind}" for kind, n in sorted(kinds.items())]
