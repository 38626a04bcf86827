"""[usage] The usage page's process gets no Kubernetes token, as the real
kube-apiserver admits the hub pod: the z2jh 4.4.0 chart rendered by Helm from our
values, its hub Deployment's pod created (server-side dry run: every admission
plugin runs, nothing is stored) as the hub's ServiceAccount's pod. The
ServiceAccount admission plugin mounts the token into the hub's container (the hub
needs it) and not into the container that runs the usage page (an empty volume
covers the token's path there)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from jupyterhub_gpu.bundle.namespaces import HubRef

from .. import z2jh_chart
from .hubpod import SA_DIR

TOKEN_DIR = str(SA_DIR)
CHART = z2jh_chart.CHART
USAGE_MODULE = "jupyterhub_gpu.usage.service"


def _helm() -> str:
    from jupyterhub_gpu.devcluster import build

    if "helm" in build.PINS:
        return str(build.binaries()["helm"])
    found = shutil.which("helm")
    if found is None:
        pytest.skip("needs a helm binary (the dev cluster's pin or one on PATH)")
    return found


def _hub_pod() -> dict:
    """The hub Deployment's pod template as Helm renders the chart from our values."""
    if not CHART.is_dir():
        pytest.skip(f"the z2jh 4.4.0 chart is not at {CHART}")
    rendered = subprocess.run(
        [_helm(), "template", "jupyterhub", str(CHART), "--namespace", HubRef().namespace,
         *(a for path in z2jh_chart.OUR_VALUES for a in ("-f", str(path)))],
        capture_output=True, text=True, check=True).stdout
    (hub,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"
              and d["metadata"]["name"] == "hub"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "hub-admission-probe", "namespace": HubRef().namespace,
                         "labels": hub["spec"]["template"]["metadata"]["labels"]},
            "spec": hub["spec"]["template"]["spec"]}


def _token_mounts(pod, container) -> list[str]:
    """The volumes mounted at the token's path in ``container`` that hold a token."""
    volumes = {v.name: v for v in pod.spec.volumes}
    return [m.name for m in container.volume_mounts or ()
            if m.mount_path == TOKEN_DIR and (volumes[m.name].projected is not None
                                              or volumes[m.name].secret is not None)]


async def test_the_usage_page_runs_where_no_kubernetes_token_is_mounted(kube, cluster):
    body = _hub_pod()
    admitted = await kube.core.create_namespaced_pod(HubRef().namespace, body, dry_run="All")
    assert admitted.spec.service_account_name == "hub"
    containers = {c.name: c for c in admitted.spec.containers}
    assert _token_mounts(admitted, containers["hub"])  # the hub keeps its identity
    # the usage page runs in its own container; a managed service would run in the hub's
    usage = [c for c in containers.values() if USAGE_MODULE in " ".join(c.command or ())]
    (runs_usage,) = usage or [containers["hub"]]
    assert _token_mounts(admitted, runs_usage) == [], (
        f"container {runs_usage.name} runs the usage page with the hub's token")
    assert not {e.name for e in runs_usage.env or ()} & {"KUBECONFIG"}
