"""The cluster tier runs as the hub's ServiceAccount, bound only by the RBAC we ship
(the bundle's team-namespace Roles, the hub's node-reading ClusterRole and the z2jh
chart's hub Role, :mod:`.hub_rbac`): the in-process spawners authenticate as it, and a
hub whose RBAC lacks one verb of the bundle fails exactly where that verb is needed,
with the API server's 403 (without its node watch, only the metric it feeds)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from jupyterhub_gpu.bundle.namespaces import HubRef
from jupyterhub_gpu.devcluster import demo

from . import hub_rbac
from .conftest import STATE_DIR, wait_for
from .test_demo import (PORTS, URL, _hub_server, _lab_up, _login_when_up, _stop_hub,
                        _xsrf)

NAMESPACE = "jhub-experimentation"  # carol's team


async def test_in_process_spawners_are_the_hubs_service_account(cluster, cluster_spec_path):
    from kubernetes_asyncio import client
    from traitlets.config import Config

    from jupyterhub_gpu.hub.render import OfflineHub, OfflineUser, _Group
    from jupyterhub_gpu.hub.spawner import GPUSpawner

    cfg = Config()
    cfg.GPUSpawner.platform_file = str(cluster_spec_path)
    spawner = GPUSpawner(user=OfflineUser("carol", [_Group("experimentation")]),
                         hub=OfflineHub(), config=cfg)
    review = await client.AuthenticationV1Api(spawner.api.api_client).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    user = review.status.user_info
    assert user.username == "system:serviceaccount:jupyterhub:hub"
    assert "system:masters" not in user.groups


def _forbidden(log: str, hub: HubRef, verb: str, resource: str) -> bool:
    """The API server's 403 for ``hub`` doing ``verb`` on ``resource`` is in the log."""
    user = re.escape(f"system:serviceaccount:{hub.namespace}:{hub.service_account}")
    return re.search(rf'User \\?"{user}\\?" cannot {verb} resource \\?"{resource}\\?"',
                     log) is not None


async def _post_spawn(http, profile) -> int:
    async with http.post(f"{URL}/hub/spawn", data={"profile": profile,
                                                  "_xsrf": _xsrf(http)}) as r:
        return r.status  # 500 when the spawn fails before the page returns


async def _spawn_fails(http, kube, refused) -> None:
    """The spawn fails on the 403: no server, no pod."""
    assert await _post_spawn(http, "t4-shared") in (200, 500)
    await wait_for(refused, timeout=120, what="the API server's 403")
    await wait_for(lambda: _no_server(http), timeout=120, what="carol's server to fail")
    pods = await kube.core.list_namespaced_pod(NAMESPACE)
    assert [p.metadata.name for p in pods.items] == []


async def _no_server(http):
    return (await _hub_server(http, "carol")) is None


async def _stop_fails(http, kube, refused) -> None:
    """The server starts; stopping it fails on the 403, which the hub log shows (the
    hub itself forgets the server quietly), and the pod stays."""
    assert await _post_spawn(http, "t4-shared") == 200
    await wait_for(lambda: _lab_up(http, "carol"), timeout=120, what="carol's JupyterLab")
    async with http.delete(f"{URL}/hub/api/users/carol/server",
                           headers={"X-XSRFToken": _xsrf(http)}) as r:
        assert r.status in (202, 204), await r.text()
    await wait_for(refused, timeout=120, what="the API server's 403")
    pod = await kube.core.read_namespaced_pod("jupyter-carol", NAMESPACE)
    assert pod.metadata.deletion_timestamp is None


async def _spawn_works_without_the_gauge(http, kube, refused) -> None:
    """The hub's node watch is refused, which the hub log shows; the server starts all
    the same (only ``jupyterhub_gpu_pool_nodes`` is missing)."""
    assert await _post_spawn(http, "t4-shared") == 200
    await wait_for(refused, timeout=120, what="the API server's 403")
    await wait_for(lambda: _lab_up(http, "carol"), timeout=120, what="carol's JupyterLab")


@pytest.mark.parametrize("resource, verb, scenario", [
    ("pods", "create", _spawn_fails),        # KubeSpawner creates the user's pod
    ("workloads", "list", _spawn_fails),     # GPUSpawner's shared Workload watch
    ("pods", "delete", _stop_fails),         # stop and cull remove the pod
    ("nodes", "list", _spawn_works_without_the_gauge),  # the hub's one node watch
])
async def test_a_verb_missing_from_the_shipped_rbac_fails_with_403(
        cluster, cluster_platform, cluster_spec_path, kube, tmp_path, resource, verb,
        scenario):
    from jupyterhub_gpu.devcluster.podrunner import PodRunner

    hub_ref = HubRef(namespace=f"hub-without-{verb}-{resource}")
    objects = hub_rbac.without([*hub_rbac.chart_hub_rbac(hub_ref),
                                *hub_rbac.shipped_rbac(cluster_platform, hub_ref)],
                               resource, verb)
    kubeconfig = hub_rbac.give_the_hub_its_identity(
        STATE_DIR, cluster_platform, tmp_path / "kubeconfig", hub_ref, objects)
    demo.ensure_chp(progress=lambda m: None)
    runner = asyncio.create_task(PodRunner(Path(cluster["kubeconfig"]), tmp_path).run())
    hub = await demo.start_hub(cluster_spec_path, kubeconfig, tmp_path, URL, **PORTS)
    carol = None
    log = tmp_path / "hub.log"
    try:
        carol = await _login_when_up("carol")
        await scenario(carol, kube, lambda: _forbidden(log.read_text(), hub_ref, verb, resource))
    finally:
        if carol:
            await carol.close()
        await _stop_hub(hub, runner)
        await _remove_pod(kube, "jupyter-carol")


async def _remove_pod(kube, name):
    from kubernetes_asyncio.client import ApiException

    try:
        await kube.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    except ApiException as e:
        if e.status != 404:
            raise
    await wait_for(lambda: _pod_absent(kube, name), timeout=60, what=f"{name} to go")


async def _pod_absent(kube, name):
    pods = await kube.core.list_namespaced_pod(NAMESPACE)
    return name not in [p.metadata.name for p in pods.items]
