"""Who reaches a GPU kernel, by a real NetworkPolicy evaluator and without a cluster:
cyclonus (built with the dev cluster) evaluates the shipped team-namespace policies
and each kernel's own (:func:`jupyterhub_gpu.builders.kernel.kernel_policies`) for
traffic between kernel pods from :func:`build_kernel_pod` and server pods as
GPUSpawner (KubeSpawner under the z2jh chart's config) labels them. Only the owning
server reaches its kernel, on the kernel's ports; the kernel reaches only that server,
on the response port, besides DNS and the internet. The cluster-wide truth table
(tests/integration/test_network_policies.py) has the kernels' rows too, beside the z2jh
chart's own policies and with the chart hub's server pods."""

from __future__ import annotations

import json
import os
import re
import subprocess
from types import SimpleNamespace

import pytest
import yaml

from jupyterhub_gpu.builders.kernel import (KernelRequest, Launch, Owner, build_kernel_pod,
                                            kernel_name, kernel_policies)
from jupyterhub_gpu.bundle import namespaces
from jupyterhub_gpu.bundle.namespaces import HUB_PORT
from jupyterhub_gpu.contract import (COMPONENT_LABEL, HUB_COMPONENT, JOBS_PORT, KERNEL_PORTS,
                                     KERNEL_RESPONSE_PORT, KERNELS_PORT, NAMESPACE_NAME_LABEL,
                                     PROXY_COMPONENT)
from jupyterhub_gpu.devcluster.build import binaries
from jupyterhub_gpu.spec.grant import UserRef, authorize
from tests import z2jh_chart

NAMESPACE = "jhub-ml-eng"
TEAM = frozenset({"ml-eng"})
KERNEL_A = "5f0c2d9e-8b1a-4c3e-9d7f-0a1b2c3d4e5f"
KERNEL_B = "0a1b2c3d-4e5f-4c3e-9d7f-5f0c2d9e8b1a"
KEY = "MCowBQYDK2VuAyEA" + "C" * 28
ALL_KERNEL_PORTS = frozenset(KERNEL_PORTS.values())
TCP_PORTS = (*sorted(ALL_KERNEL_PORTS), KERNEL_RESPONSE_PORT, 8888, HUB_PORT, JOBS_PORT,
             KERNELS_PORT, 443, 80, 53)
PUBLIC = "93.184.215.14"


def _cyclonus() -> str:
    try:
        path = binaries()["cyclonus"]
    except Exception as e:  # noqa: BLE001 - no dev cluster build here at all
        pytest.skip(f"cannot locate the dev cluster's cyclonus: {e}")
    if not os.access(path, os.X_OK):
        pytest.skip("cyclonus is not built: run `jupyterhub-gpu devcluster build`")
    return str(path)


async def _server_pod(example_spec_path, user: str, server: str) -> dict:
    """A CPU server's pod as GPUSpawner makes it under the chart's config: the user's
    default server (``server`` empty) or a named one (JupyterHub's spawner takes its
    name from its ORM row)."""
    from kubernetes_asyncio.client import ApiClient

    from jupyterhub_gpu.hub.render import OfflineHub, OfflineUser, _Group
    from jupyterhub_gpu.hub.spawner import GPUSpawner

    config = z2jh_chart.kubespawner_config(z2jh_chart.helm_values())
    config.GPUSpawner.platform_file = str(example_spec_path)
    spawner = GPUSpawner(user=OfflineUser(user, [_Group("ml-eng")]), hub=OfflineHub(),
                         config=config, orm_spawner=SimpleNamespace(name=server, server=None) if server
                         else None)
    assert spawner.name == server
    await spawner._run_apply_user_options({"profile": "cpu"})
    async with ApiClient() as client:
        pod = client.sanitize_for_serialization(await spawner.get_pod_manifest())
    await spawner.api.api_client.close()
    assert spawner.namespace == NAMESPACE  # where KubeSpawner creates it
    return pod


def _kernel(platform, owner: Owner, kernel_id: str, server_ip: str) -> KernelRequest:
    grant = authorize(platform, UserRef(owner.user_slug, TEAM), {"profile": "t4-shared"})
    return KernelRequest(kernel_name(owner.user_slug, kernel_id), owner.user_slug, owner,
                         grant, Launch(kernel_id, f"{server_ip}:{KERNEL_RESPONSE_PORT}", KEY))


def _pod_peer(ip: str, labels: dict, namespace: str = NAMESPACE) -> dict:
    return {"IP": ip, "Internal": {"PodLabels": labels, "Namespace": namespace,
                                   "NamespaceLabels": {NAMESPACE_NAME_LABEL: namespace}}}


@pytest.fixture
async def world(platform, offline_kubeconfig, example_spec_path) -> tuple[dict[str, dict], list[dict]]:
    """(peer name -> cyclonus peer, every policy that selects a team namespace's pods)."""
    servers = {"owner": ("alice", "", "10.244.1.10"), "sibling": ("alice", "lab2", "10.244.1.11"),
               "stranger": ("bob", "", "10.244.1.12")}
    pods = {name: await _server_pod(example_spec_path, user, server)
            for name, (user, server, _) in servers.items()}
    peers = {name: _pod_peer(servers[name][2], pod["metadata"]["labels"])
             for name, pod in pods.items()}
    policies = [o for o in namespaces.team_objects(platform) if o["kind"] == "NetworkPolicy"]
    for name, kernel_id, owner, ip in (("kernel", KERNEL_A, "owner", "10.244.5.20"),
                                       ("bobs-kernel", KERNEL_B, "stranger", "10.244.5.21")):
        req = _kernel(platform, Owner.of(pods[owner]), kernel_id, servers[owner][2])
        peers[name] = _pod_peer(ip, build_kernel_pod(platform, req)["metadata"]["labels"])
        policies += kernel_policies(req)
    release = namespaces.HubRef().namespace
    for role, ip in ((HUB_COMPONENT, "10.244.0.5"), (PROXY_COMPONENT, "10.244.0.6")):
        peers[role] = _pod_peer(ip, {COMPONENT_LABEL: role}, release)
    peers.update(internet={"IP": PUBLIC}, metadata={"IP": "169.254.169.254"},
                 wireserver={"IP": "168.63.129.16"})
    return peers, policies


#: the pods of the team namespace, whose own ingress policies judge traffic to them
TEAM_PODS = ("owner", "sibling", "stranger", "bobs-kernel")


def _allowed(src: str, dst: str, port: int) -> bool:
    """What the rules say of traffic that touches alice's kernel. The hub and the proxy
    are judged by the team namespace's policies alone (the chart's own, which fence
    the hub further, are not evaluated here)."""
    if (src, dst) == ("owner", "kernel"):
        return port in ALL_KERNEL_PORTS
    if src != "kernel":
        return False  # nobody else reaches the kernel
    if dst in TEAM_PODS:
        return (dst, port) == ("owner", KERNEL_RESPONSE_PORT)
    if dst == "internet":
        return True
    return port == 53  # DNS on any address (the hub's pod included), as a job's pod has it


def test_only_the_owning_server_reaches_its_kernel_and_the_kernel_only_it(world, tmp_path):
    cyclonus = _cyclonus()
    peers, policies = world
    others = [n for n in peers if n != "kernel"]
    cases = [(s, d, port, proto) for s, d in [("kernel", o) for o in others]
             + [(o, "kernel") for o in others if o not in ("internet", "metadata", "wireserver")]
             for port in TCP_PORTS for proto in (("TCP", "UDP") if port == 53 else ("TCP",))]
    traffic = [{"Source": peers[s], "Destination": peers[d], "Protocol": proto,
                "ResolvedPort": port, "ResolvedPortName": ""} for s, d, port, proto in cases]
    (tmp_path / "policies").mkdir()
    for i, policy in enumerate(policies):  # one policy a file: how cyclonus reads them
        (tmp_path / "policies" / f"{i:03d}.yaml").write_text(yaml.safe_dump(policy))
    (tmp_path / "traffic.json").write_text(json.dumps(traffic))
    out = subprocess.run([cyclonus, "analyze", "--mode", "query-traffic", "--policy-path",
                          str(tmp_path / "policies"), "--traffic-path",
                          str(tmp_path / "traffic.json")], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    verdicts = [v == "TRUE" for v in
                re.findall(r"\|\s*IS ALLOWED\?\s*\|\s*(TRUE|FALSE)\s*\|", out.stdout)]
    assert len(verdicts) == len(cases), out.stdout[-2000:]
    wrong = [f"{s} -> {d} {port}/{proto}: {'allowed' if ok else 'denied'}"
             for (s, d, port, proto), ok in zip(cases, verdicts) if ok != _allowed(s, d, port)]
    assert not wrong, "\n".join(wrong)
    # the table judged both ways: something allowed, something denied, per kind of peer
    assert any(verdicts) and not all(verdicts)


def test_the_server_pods_are_told_apart_by_their_labels(world):
    peers, _ = world
    labels = {n: peers[n]["Internal"]["PodLabels"] for n in ("owner", "sibling", "stranger")}
    assert len({tuple(sorted(v.items())) for v in labels.values()}) == 3
