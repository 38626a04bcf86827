"""[usage] The usage page's process gets no Kubernetes token, as the real
kube-apiserver admits the hub pod: the z2jh 4.4.0 chart rendered by Helm in the admin
guide's install order (:func:`tests.z2jh_chart.helm_template`), its hub Deployment's
pod created (server-side dry run: every admission plugin runs, nothing is stored) as
the hub's ServiceAccount's pod. The
ServiceAccount admission plugin mounts the token into the hub's container (the hub
needs it) and not into the container that runs the usage page (an empty volume
covers the token's path there)."""

from __future__ import annotations

from jupyterhub_gpu.bundle.namespaces import HubRef

from .. import z2jh_chart
from .hubpod import SA_DIR

TOKEN_DIR = str(SA_DIR)
USAGE_MODULE = "jupyterhub_gpu.usage.service"


def _hub_pod() -> dict:
    """The hub Deployment's pod template as Helm renders the chart in the install order."""
    from jupyterhub_gpu.devcluster import build

    (hub,) = [d for d in z2jh_chart.helm_template(build.binaries()["helm"])
              if d["kind"] == "Deployment" and d["metadata"]["name"] == "hub"]
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
