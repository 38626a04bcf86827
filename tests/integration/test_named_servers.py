"""[ux] A CPU server beside a GPU server, through a real JupyterHub with named servers,
on the dev cluster: the CPU profile goes through Kueue (flavor ``cpu``) onto a CPU node
Karpenter starts, asking for no GPU; a second GPU server is refused with the reason,
and creates nothing."""

from __future__ import annotations

import json

from jupyterhub_gpu.contract import AGENTPOOL_LABEL, PROFILE_LABEL

from .conftest import wait_for
from .test_demo import URL, _lab_up, _login, _xsrf, hub  # noqa: F401 - hub is a fixture

NAMESPACE = "jhub-data-science"
REFUSED = "You already have a GPU server running (gpu); stop it first or pick a CPU profile."


async def _start(http, server: str, profile: str):
    async with http.post(f"{URL}/hub/api/users/alice/servers/{server}",
                         json={"profile": profile},
                         headers={"X-XSRFToken": _xsrf(http)}) as r:
        return r.status, await r.text()


async def _pod_of(kube, profile: str):
    pods = await kube.core.list_namespaced_pod(NAMESPACE, label_selector=PROFILE_LABEL)
    return next((p for p in pods.items if p.metadata.labels[PROFILE_LABEL] == profile), None)


async def _everything(kube) -> tuple[set, set]:
    pods = await kube.core.list_namespaced_pod(NAMESPACE)
    workloads = await kube.workloads(NAMESPACE)
    return ({p.metadata.name for p in pods.items},
            {w["metadata"]["name"] for w in workloads})


async def _servers(http) -> dict:
    async with http.get(f"{URL}/hub/api/users/alice",
                        headers={"X-XSRFToken": _xsrf(http)}) as r:
        return (await r.json())["servers"]


async def test_a_cpu_server_beside_a_gpu_server_and_no_second_gpu_server(hub, kube):  # noqa: F811
    await _login(hub, "alice")  # data-science
    for server, profile in (("gpu", "t4-shared"), ("cpu", "cpu")):
        status, text = await _start(hub, server, profile)
        assert status in (201, 202), text
    await wait_for(lambda: _lab_up(hub, "alice/gpu"), timeout=120, what="the GPU server")
    await wait_for(lambda: _lab_up(hub, "alice/cpu"), timeout=120, what="the CPU server")

    cpu_pod = await _pod_of(kube, "cpu")
    resources = cpu_pod.spec.containers[0].resources
    asked = {**(resources.requests or {}), **(resources.limits or {})}
    assert asked and not [r for r in asked if r.startswith("nvidia.com/")], asked
    assert not [t for t in cpu_pod.spec.tolerations or [] if (t.key or "").startswith("nvidia")]
    node = await kube.core.read_node(cpu_pod.spec.node_name)
    assert node.metadata.labels[AGENTPOOL_LABEL] == "cpu"
    assert not [r for r in node.status.capacity if r.startswith("nvidia.com/")]
    assert (await kube.node_claims("cpu")), "Karpenter started the CPU node"
    workload = await kube.workload_for(cpu_pod)
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"] == {"cpu": "cpu", "memory": "cpu"}

    before = await _everything(kube)
    status, text = await _start(hub, "gpu2", "a100-mig-3g")
    assert (status, json.loads(text)["message"]) == (400, REFUSED)
    async with hub.post(f"{URL}/hub/spawn/alice/gpu3",
                        data={"profile": "a100-mig-3g", "_xsrf": _xsrf(hub)}) as r:
        page = await r.text()
    assert REFUSED.replace("'", "&#39;") in page or REFUSED in page
    assert await _everything(kube) == before, "a refused GPU server creates nothing"
    servers = await _servers(hub)
    assert {n for n, s in servers.items() if s.get("ready")} == {"gpu", "cpu"}
    assert not {"gpu2", "gpu3"} & {n for n, s in servers.items() if s.get("pending")}

