"""[kernels] The gpu-kernels service on the dev cluster, called as a user's server calls
it: the demo's JupyterHub (as the hub's ServiceAccount, bound only by the RBAC we
ship) runs the service (``add_kernels_service`` in the demo's config); alice's CPU
server asks it, with the server's own API token and the URL the hub put in the
server's environment, for a GPU kernel of a profile she may use. The kernel's pod
appears in her team namespace as a server of that profile would (Kueue's queue and
priority, the GPU resource, Pod Security ``restricted``, no ServiceAccount token),
with its two NetworkPolicies owned by it; Kueue admits it, Karpenter starts a node,
kwok runs it. A profile her groups do not allow, a CPU profile, a forged field,
another server's address, a missing or forged token, and a start over
``gpuKernelsPerUser`` create nothing; dave, of her team, with a server of his own,
can neither see, delete nor answer for her kernels, and a kernel he starts with her
kernel's id is selected by his policies alone.

And a notebook's cell runs in such a pod, two ways: with this process standing for
alice's server's (at her server pod's address, with its token and environment) and
real ``jupyter_client`` starting the kernel through the provisioner; and through her
real server's kernel API, the provisioner running in that server. Either way the
dev cluster's pod runner runs the pod's kernel launcher, which sends its connection
back sealed to her server's address; the cell reads the kernel's environment (its
profile, its pod's address, no JupyterHub token); an interrupt stops a running
cell; shutdown deletes the pod and its policies."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

import aiohttp
import pytest

from jupyterhub_gpu.builders.kernel import LAUNCHER_MODULE
from jupyterhub_gpu.contract import (AGENTPOOL_LABEL, COMPONENT_LABEL, ENV_API_TOKEN,
                                     ENV_KERNELS_URL, ENV_POD_IP, ENV_PROFILE,
                                     KERNEL_COMPONENT, KERNEL_ID_LABEL, KERNEL_PORTS,
                                     KERNEL_RESPONSE_PORT, KERNELS_API_PATH, PRIORITY_LABEL,
                                     PROFILE_LABEL, QUEUE_LABEL)
from jupyterhub_gpu.kernels import provisioner as provisioning
from jupyterhub_gpu.kernels.connect import ServerKey
from jupyterhub_gpu.kernels.request import gpu_profiles_for
from jupyterhub_gpu.kernels.server_ext import keep_kernelspecs
from tests import kernel_provisioner_entry
from tests.kernelcells import run_cell

from .conftest import wait_for
from .job_terminal import send, server_env
from .test_demo import URL, _login, _login_session, _serving, _spawn_and_wait, _xsrf

NAMESPACE = "jhub-data-science"
PROFILE = "t4-shared"  # a GPU profile every team may use
SERVER_PROFILE = "cpu"  # the cheap server the kernels belong to (data-science only)


@pytest.fixture
async def hub(cluster, cluster_spec_path, hub_kubeconfig, tmp_path):
    """The demo's hub; alice logged in."""
    async with _serving(cluster, cluster_spec_path, hub_kubeconfig, tmp_path / "hub") as http:
        await _login(http, "alice")
        yield http


class Server:
    """A user's running CPU server, as its kernel provisioner would call the service:
    with the token and the service URL in its environment, from its pod's address."""

    def __init__(self, pod: dict):
        env = server_env(pod)
        self.pod, self.token = pod, env[ENV_API_TOKEN]
        self.api = env[ENV_KERNELS_URL] + KERNELS_API_PATH
        self.ip = pod["status"]["podIP"]

    def body(self, profile: str = PROFILE, kernel_id: str | None = None, **extra) -> dict:
        """A start request: a fresh kernel id and key pair, answered at this server."""
        return {"profile": profile, "kernel_id": kernel_id or str(uuid.uuid4()),
                "response_address": f"{self.ip}:{KERNEL_RESPONSE_PORT}",
                "public_key": ServerKey().public_key, **extra}

    async def call(self, method: str, path: str = "", body=None, token: str | None = ...):
        return await send(method, self.api + path, self.token if token is ... else token, body)


async def _server(http, kube, user: str) -> Server:
    await _spawn_and_wait(http, user, SERVER_PROFILE)
    pod = await kube.core.read_namespaced_pod(f"jupyter-{user}", NAMESPACE)
    return Server(kube.api_client.sanitize_for_serialization(pod))


async def _kernel_objects(kube, platform) -> dict[str, tuple[list[str], list[str]]]:
    """Every team namespace's GPU kernel pods and NetworkPolicies, by name (the
    standing policies included)."""
    from kubernetes_asyncio.client import NetworkingV1Api

    networking = NetworkingV1Api(kube.api_client)
    found = {}
    for team in platform.teams:
        pods = await kube.core.list_namespaced_pod(
            team.namespace, label_selector=f"{COMPONENT_LABEL}={KERNEL_COMPONENT}")
        policies = await networking.list_namespaced_network_policy(team.namespace)
        found[team.namespace] = (sorted(p.metadata.name for p in pods.items),
                                 sorted(p.metadata.name for p in policies.items))
    return found


async def _pod(kube, name: str) -> dict | None:
    from kubernetes_asyncio.client import ApiException

    try:
        pod = await kube.core.read_namespaced_pod(name, NAMESPACE)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return kube.api_client.sanitize_for_serialization(pod)


async def _owned_policies(kube, pod: dict) -> list[str]:
    """The NetworkPolicies the pod owns (the garbage collector deletes them with it)."""
    from kubernetes_asyncio.client import NetworkingV1Api

    listed = await NetworkingV1Api(kube.api_client).list_namespaced_network_policy(NAMESPACE)
    return sorted(p.metadata.name for p in listed.items
                  if any(o.uid == pod["metadata"]["uid"] and o.kind == "Pod"
                         for o in p.metadata.owner_references or []))


async def _selected(kube, selector) -> set[str]:
    """The names of the namespace's pods a podSelector picks, as the API server says."""
    query = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
    return {p.metadata.name for p in (await kube.core.list_namespaced_pod(
        NAMESPACE, label_selector=query)).items}


async def _check_selectors(kube, kernel: str, user: str) -> None:
    """Each of the kernel's two policies selects, and admits, only the kernel's pod
    and its owner's server's."""
    from kubernetes_asyncio.client import NetworkingV1Api

    networking = NetworkingV1Api(kube.api_client)
    pod = await _pod(kube, kernel)
    names = await _owned_policies(kube, pod)
    assert len(names) == 2, names
    mine = {kernel, f"jupyter-{user}"}
    for name in names:
        policy = kube.api_client.sanitize_for_serialization(
            await networking.read_namespaced_network_policy(name, NAMESPACE))["spec"]
        peers = [p["podSelector"] for rule in policy["ingress"] + policy["egress"]
                 for p in rule.get("from", []) + rule.get("to", [])]
        picked = await _selected(kube, policy["podSelector"])
        assert len(picked) == 1 and picked <= mine, (name, picked)
        for peer in peers:
            found = await _selected(kube, peer)
            assert len(found) == 1 and found <= mine - picked, (name, found)


def _check_kernel_pod(pod: dict, platform, kernel_id: str, server: Server) -> None:
    """The pod is a server's of the profile, for the team, with the kernel's launcher."""
    team, profile = platform.team_for({"data-science"}), platform.profile(PROFILE)
    labels, spec = pod["metadata"]["labels"], pod["spec"]
    assert (labels[COMPONENT_LABEL], labels[KERNEL_ID_LABEL], labels[PROFILE_LABEL]) == (
        KERNEL_COMPONENT, kernel_id, PROFILE)
    assert (labels[QUEUE_LABEL], labels[PRIORITY_LABEL]) == (team.local_queue, profile.priority)
    (container,) = spec["containers"]
    resource = platform.pools_of(profile)[0].resource_name
    assert resource and container["resources"]["limits"][resource] == "1", container
    assert container["command"][:3] == ["python", "-m", LAUNCHER_MODULE]
    assert f"{server.ip}:{KERNEL_RESPONSE_PORT}" in container["command"]
    assert sorted(p["containerPort"] for p in container["ports"]) == sorted(KERNEL_PORTS.values())
    # least privilege: no Kubernetes credentials, no JupyterHub token, not root
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert ENV_API_TOKEN not in {e["name"] for e in container.get("env", [])}
    assert spec["securityContext"]["runAsNonRoot"] is True
    # the server's user and groups (the demo's servers run as their image's user)
    server_context = server.pod["spec"].get("securityContext") or {}
    for field in ("runAsUser", "runAsGroup", "fsGroup"):
        assert spec["securityContext"].get(field) == server_context.get(field), field
    assert spec["securityContext"].get("runAsUser") != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


async def test_a_server_starts_a_gpu_kernel_of_its_profile_and_deletes_it(
        hub, kube, cluster_platform):
    server = await _server(hub, kube, "alice")
    body = server.body()
    status, kernel = await server.call("POST", body=body)
    assert status == 201, kernel
    assert (kernel["id"], kernel["namespace"], kernel["profile"]) == (
        body["kernel_id"], NAMESPACE, PROFILE)
    pod = await _pod(kube, kernel["name"])
    assert pod is not None
    _check_kernel_pod(pod, cluster_platform, body["kernel_id"], server)
    assert len(await _owned_policies(kube, pod)) == 2

    async def running():
        status, seen = await server.call("GET", f"/{body['kernel_id']}")
        assert status == 200, seen
        return seen if seen["phase"] == "Running" and seen["address"] else None

    # Kueue admits it to the team's queue, Karpenter starts a T4 node, kwok runs it
    seen = await wait_for(running, timeout=120, interval=1, what="the kernel's pod to run")
    pod = await _pod(kube, kernel["name"])
    assert seen["address"] == pod["status"]["podIP"]
    node = await kube.core.read_node(pod["spec"]["nodeName"])
    (pool,) = cluster_platform.pools_of(cluster_platform.profile(PROFILE))
    assert node.metadata.labels[AGENTPOOL_LABEL] == pool.name
    workload = await kube.workload_for(await kube.core.read_namespaced_pod(kernel["name"],
                                                                           NAMESPACE))
    assert workload and any(c["type"] == "Admitted" and c["status"] == "True"
                            for c in workload["status"]["conditions"]), workload

    status, listed = await server.call("GET")
    assert status == 200 and [k["id"] for k in listed["kernels"]] == [body["kernel_id"]]
    status, answer = await server.call("DELETE", f"/{body['kernel_id']}")
    assert status == 200 and answer["phase"] == "Deleting", answer

    async def gone():
        return await _pod(kube, kernel["name"]) is None and not await _owned_policies(kube, pod)

    await wait_for(gone, timeout=90, interval=1, what="the kernel's pod and policies to go")
    status, answer = await server.call("GET", f"/{body['kernel_id']}")
    assert status == 404, answer


FORGED = [
    # (what is asked, status, what the answer says)
    ({"profile": "a100-training"}, 403, "You may not use profile 'a100-training'"),
    ({"profile": "cpu"}, 400, "has no GPU"),
    ({"profile": "nope"}, 400, "Unknown profile 'nope'"),
    ({"namespace": "jhub-ml-eng"}, 400, "the namespace is your team's"),
    ({"image": "evil/miner"}, 400, "the image is the profile's"),
    ({"command": ["sh"]}, 400, "unknown: 'command'"),
    ({"response_address": f"127.0.0.1:{KERNEL_RESPONSE_PORT}"}, 403,
     "The response address must be your server's"),
    ({"response_address": "10.0.0.1:22; rm -rf /"}, 400, "is not <ip>:<port>"),
]


async def test_refused_starts_create_nothing(hub, kube, cluster_platform):
    """A profile her groups do not allow, a CPU or unknown profile, a forged field,
    an address not her server's, no token or a forged one: each refused, saying
    why, and not one pod or policy made."""
    server = await _server(hub, kube, "alice")
    before = await _kernel_objects(kube, cluster_platform)
    for change, status, words in FORGED:
        body = server.body()
        body.update(change)
        said = await server.call("POST", body=body)
        assert said[0] == status and words in said[1]["error"], (change, said)
    assert (await server.call("POST", body=server.body(), token=None))[0] == 403
    assert (await server.call("POST", body=server.body(), token="not-a-token"))[0] == 403
    assert (await server.call("GET", token="not-a-token"))[0] == 403
    assert await _kernel_objects(kube, cluster_platform) == before


async def test_the_cap_and_another_users_kernels(hub, kube, cluster_platform):
    """alice starts ``gpuKernelsPerUser`` kernels; one more is refused and makes
    nothing. dave (her team, a server of his own) does not see hers, cannot get or
    delete one by its id, nor start one that would answer to her server."""
    cap = cluster_platform.gpu_kernels_per_user
    assert cap >= 1
    alice = await _server(hub, kube, "alice")
    ids = []
    for _ in range(cap):
        body = alice.body()
        status, said = await alice.call("POST", body=body)
        assert status == 201, said
        ids.append(body["kernel_id"])
    before = await _kernel_objects(kube, cluster_platform)
    status, said = await alice.call("POST", body=alice.body())
    assert status == 409 and f"the most one user may have at once ({cap})" in said["error"], said
    assert await _kernel_objects(kube, cluster_platform) == before

    dave_http = await _login_session("dave")
    try:
        dave = await _server(dave_http, kube, "dave")
        status, listed = await dave.call("GET")
        assert status == 200 and listed["kernels"] == [], listed
        for kid in ids:
            assert (await dave.call("GET", f"/{kid}"))[0] == 404
            assert (await dave.call("DELETE", f"/{kid}"))[0] == 404
        as_alice = dave.body(response_address=f"{alice.ip}:{KERNEL_RESPONSE_PORT}")
        status, said = await dave.call("POST", body=as_alice)
        assert status == 403 and "must be your server's" in said["error"], said
        # a kernel id is no secret: dave may start one of alice's id, and gets a pod of
        # his own, which neither her kernel's policies nor his select beside theirs
        status, his = await dave.call("POST", body=dave.body(kernel_id=ids[0]))
        assert status == 201, his
        hers = (await alice.call("GET", f"/{ids[0]}"))[1]
        assert his["name"] != hers["name"]
        await _check_selectors(kube, hers["name"], "alice")
        await _check_selectors(kube, his["name"], "dave")
        # alice's kernels are as she left them
        status, listed = await alice.call("GET")
        assert status == 200 and sorted(k["id"] for k in listed["kernels"]) == sorted(ids)
        assert all(k["phase"] != "Deleting" for k in listed["kernels"]), listed
        # each deletes their own (the next test starts with none)
        assert (await dave.call("DELETE", f"/{ids[0]}"))[0] == 200
        for kid in ids:
            assert (await alice.call("DELETE", f"/{kid}"))[0] == 200
    finally:
        await dave_http.close()


#: a guard against a hang (the queue, a node's start, the launcher's), never a measure
GUARD_SECONDS = 240
SEEN = (ENV_PROFILE, ENV_POD_IP, ENV_API_TOKEN)


async def _cell(client, code: str) -> str:
    return await run_cell(client, code, GUARD_SECONDS)


async def test_a_notebook_runs_a_cell_in_a_gpu_kernels_pod(hub, kube, cluster_platform,
                                                          tmp_path, monkeypatch):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    server = await _server(hub, kube, "alice")
    kernel_provisioner_entry.register(tmp_path / "site", monkeypatch)
    url = server_env(server.pod)[ENV_KERNELS_URL]
    for name, value in ((ENV_KERNELS_URL, url), (ENV_API_TOKEN, server.token),
                        (ENV_POD_IP, server.ip)):
        monkeypatch.setenv(name, value)
    specs = tmp_path / "kernels"
    names = await keep_kernelspecs(specs, url, server.token, logging.getLogger(__name__),
                                   attempts=1)
    assert names == sorted(f"gpu-{p.slug}"
                           for p in gpu_profiles_for(cluster_platform, {"data-science"}))
    km = AsyncKernelManager(kernel_name=f"gpu-{PROFILE}",
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)]))
    await asyncio.wait_for(km.start_kernel(), GUARD_SECONDS)
    name = km.provisioner.pod["name"]
    pod = await _pod(kube, name)
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=GUARD_SECONDS)
        seen = json.loads(await _cell(
            client, f"import os, json; print(json.dumps({{k: os.environ.get(k) for k in {SEEN!r}}}))"))
        assert seen[ENV_PROFILE] == PROFILE and seen[ENV_POD_IP] == pod["status"]["podIP"]
        assert seen[ENV_API_TOKEN] is None, "no JupyterHub token in a kernel's pod"
        msg_id = client.execute("import time; time.sleep(120)")
        await asyncio.sleep(1)
        await km.interrupt_kernel()
        reply = await client.get_shell_msg(timeout=GUARD_SECONDS)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
    finally:
        client.stop_channels()
        await asyncio.wait_for(km.shutdown_kernel(), GUARD_SECONDS)
        for listener in list(provisioning._listeners.values()):  # her server's port
            await listener.close()
        provisioning._listeners.clear()

    async def gone():
        return await _pod(kube, name) is None and not await _owned_policies(kube, pod)

    await wait_for(gone, timeout=90, interval=1, what="the kernel's pod and policies to go")


async def start_through_server(http, kube, user: str = "alice"):
    """A GPU kernel of :data:`PROFILE` started through ``user``'s real server's kernel
    API, as JupyterLab starts one, once the server lists it; its id and its pod."""
    api = f"{URL}/user/{user}/api"
    name = f"gpu-{PROFILE}"

    async def listed():
        async with http.get(f"{api}/kernelspecs") as r:
            return name in (await r.json())["kernelspecs"] if r.status == 200 else False

    await wait_for(listed, timeout=60, interval=1, what=f"{user}'s GPU kernelspecs")
    async with http.post(f"{api}/kernels", json={"name": name},
                         headers={"X-XSRFToken": _xsrf(http, f"/user/{user}/")},
                         timeout=aiohttp.ClientTimeout(total=GUARD_SECONDS)) as r:
        assert r.status == 201, await r.text()
        kernel = (await r.json())["id"]
    pods = await kube.core.list_namespaced_pod(
        NAMESPACE, label_selector=f"{KERNEL_ID_LABEL}={kernel}")
    (pod,) = pods.items
    return kernel, pod


async def test_a_cell_runs_in_a_gpu_kernel_through_the_servers_kernel_api(
        hub, kube, cluster_platform, tmp_path, monkeypatch):
    """The whole path, as JupyterLab drives it: alice's real CPU server (run by the pod
    runner, with the provisioner's entry point on its path, as ``pip install`` puts
    it in the notebook image) lists her GPU kernels in ``/api/kernelspecs``; ``POST
    /api/kernels`` of one starts it through the provisioner in that server (the
    service makes the pod, the pod runner runs its launcher, which answers the
    server's response port); a cell runs over the kernel websocket through the
    proxy; ``DELETE`` deletes the pod."""
    import os

    site = tmp_path / "site"
    kernel_provisioner_entry.register(site, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p))
    await _server(hub, kube, "alice")
    api = f"{URL}/user/alice/api"
    headers = {"X-XSRFToken": _xsrf(hub, "/user/alice/")}
    kernel, pod = await start_through_server(hub, kube)
    msg_id = uuid.uuid4().hex
    code = f"import os; print(os.environ.get({ENV_PROFILE!r}), os.environ.get({ENV_POD_IP!r}))"
    request = {"header": {"msg_id": msg_id, "msg_type": "execute_request", "session": msg_id,
                          "username": "alice", "version": "5.3"},
               "parent_header": {}, "metadata": {}, "channel": "shell",
               "content": {"code": code, "silent": False}}
    async with hub.ws_connect(f"{api}/kernels/{kernel}/channels".replace("http", "ws", 1)) as ws:
        await ws.send_json(request)
        async for message in ws:
            data = json.loads(message.data)
            if (data.get("parent_header", {}).get("msg_id") == msg_id
                    and data["msg_type"] == "stream"):
                said = data["content"]["text"].split()
                break
    assert said == [PROFILE, pod.status.pod_ip], said
    async with hub.delete(f"{api}/kernels/{kernel}", headers=headers) as r:
        assert r.status == 204, await r.text()

    async def gone():
        return await _pod(kube, pod.metadata.name) is None

    await wait_for(gone, timeout=90, interval=1, what="the kernel's pod to go")
