"""Cluster-tier fixtures: a real kube-apiserver, etcd, controller-manager, scheduler,
kwok, the Kueue manager and Karpenter (kwok provider) adding and removing the GPU
nodes, started once per session from the binaries ``jupyterhub-gpu devcluster build``
made.

Fixtures:

- ``cluster_spec_path`` / ``cluster_platform``: ``tests/integration/platform.yaml``
  (pools from 0 nodes, small quotas without borrowing) and its parsed Platform.
- ``cluster`` (session): the dev cluster up with that spec, in a temporary state dir
  and on ports of its own (the defaults - 12000 + $JUPYTERHUB_GPU_TEST_PORT_OFFSET, plus
  1200 per pytest-xdist worker index: :mod:`.ports`; so a running ``make demo`` does not
  collide, and below the kernel's ephemeral range 32768-60999, where any outgoing
  connection may hold a port); ``down`` at the end. Each xdist worker is a pytest
  session of its own, with a cluster of its own. Its value is the dict
  ``devcluster status`` prints.
  It also has the hub's ServiceAccount ``hub`` in namespace ``jupyterhub``, bound
  only by the RBAC we ship plus the z2jh chart's hub Role (:mod:`.hub_rbac`). When
  the z2jh chart is beside the checkout, the cluster runs the chart's user-scheduler
  (its configuration as ``helm template`` renders it from the admin guide's install
  order: :func:`tests.z2jh_chart.helm_template`) and
  ``status["user_scheduler"]`` is the scheduler name the chart's hub gives
  KubeSpawner's pods; else it is None.
- ``fresh_cluster_after_each_file`` (module, autouse): after each test file, the dev
  cluster as ``devcluster up`` left it (:mod:`.reset`): the pods, Jobs, Workloads,
  PVCs, NodeClaims and nodes the file made deleted, Kueue's queues empty. So no file
  depends on what an earlier one left on its cluster, whichever order the pytest-xdist
  split gives a worker's files.
- ``hub_kubeconfig`` (session): a kubeconfig with a token of that ServiceAccount.
  Everything that plays the hub uses it: the hubs the tests start, their services
  and the in-process GPUSpawners (``KUBECONFIG`` points at it). The admin
  kubeconfig (``cluster["kubeconfig"]``) is only for set-up, the pod runner (the
  stand-in kubelet) and assertions.
- ``kube`` (session): kubernetes_asyncio ``CoreV1Api`` and ``CustomObjectsApi`` on it,
  with the admin kubeconfig, and helpers for Workloads and for a pool's Karpenter nodes
  and NodeClaims.
- ``spawn``: starts a real GPUSpawner for (user, groups, profile) and returns it
  (its pods name the user-scheduler, as under the chart, when the cluster runs one)
  (``wait=False``: returns the spawner and its start task at once; ``config``: a
  traitlets Config merged over the defaults). Every server it started is stopped at
  the end of the test.
- ``pod_history``: records every state of every pod in the team namespaces from the
  time it is requested, to assert on states that pass quickly (a scheduling gate).

The kubernetes client reads KUBECONFIG once, when first imported, so this tier runs
in its own pytest process (``make test-cluster``) pointed at the hub's kubeconfig.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

from jupyterhub_gpu import contract
from jupyterhub_gpu.devcluster.layout import Ports

from . import hub_rbac, ports, reset

if "kubernetes_asyncio" in sys.modules:
    raise pytest.UsageError("run the cluster tier in its own pytest process "
                            "(make test-cluster / pytest tests/integration)")

HERE = Path(__file__).resolve().parent
STATE_DIR = Path(tempfile.mkdtemp(prefix="jupyterhub-gpu-cluster-tests-"))
# The in-process GPUSpawners play the hub: the hub's identity (the file is written
# by the `cluster` fixture, before any spawner loads it).
HUB_KUBECONFIG = STATE_DIR / "hub-kubeconfig"
os.environ["KUBECONFIG"] = str(HUB_KUBECONFIG)
# Ports of their own, shifted by JUPYTERHUB_GPU_TEST_PORT_OFFSET (so that two test
# runs, or a test run and `make demo`, can share a machine), and by the pytest-xdist
# worker's index (each worker brings up a dev cluster of its own: .ports). They stay
# below 32768: above it the kernel hands ports to outgoing connections, and one of
# those once held a test cluster's port (CI failed with "port 38140 ... is in use").
PORT_OFFSET = ports.worker_offset(int(os.environ.get(ports.ENV_OFFSET, "0")),
                                  os.environ.get("PYTEST_XDIST_WORKER"))
TEST_PORTS = Ports.shifted(PORT_OFFSET)
#: the demo hub's ports (test_demo.py and the other tests that start one)
HUB = ports.hub_ports(PORT_OFFSET)
KUEUE = ("kueue.x-k8s.io", "v1beta2")
KARPENTER = tuple(contract.KARPENTER_API_VERSION.split("/"))  # (group, version)
NODEPOOL_LABEL = contract.NODEPOOL_LABEL
#: the namespaces the tests make pods, Jobs and PVCs in, beside the teams' (the chart
#: hub's release namespace; test_fit.py's default)
OTHER_NAMESPACES = (hub_rbac.HUB.namespace, "default")
#: the objects ``devcluster up`` left (:func:`reset.snapshot`), once the cluster is up
FRESH: dict[str, reset.Snapshot] = {}


#: the slowest test files, slowest first (from the slowest steps `make test-cluster`
#: prints), so that ``--dist loadfile --no-loadscope-reorder`` starts them first and no
#: worker is left with a long file at the end; the files not named are quicker, and
#: come after these in their own order
SLOWEST_FIRST = (  # a 2-worker run of 2026-12-07, in seconds of its 60 slowest steps
    "test_autoscale.py",  # 211
    "test_job_disruption.py",  # 192
    "test_demo.py",  # 174
    "test_browser_kernels.py",  # about 196 in a one-process run (added after that run)
    "test_replay.py",  # 149
    "test_apiserver_faults.py",  # 143
    "test_browser_day.py",  # 127
    "test_chart_home.py",  # 126
    "test_chart_services.py",  # 125
    "test_availability.py",  # 112
    "test_kernel_cull.py",  # 227 alone at load 9, its 60 s idle timeout included (added after)
    "test_component_faults.py",  # 103
    "test_prometheus.py",  # 91
    "test_jobs.py",  # 72
    "test_rbac.py",  # 71
    "test_demo_cleanup.py",  # 66
    "test_job_service.py",  # 58
    "test_hostile_jobs.py",  # 55
    "test_queue_lifecycle.py",  # 52
)


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.cluster)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process: the files in their own (alphabetical) order
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    # a stable sort by file: each file's tests stay together and in their order
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def cluster_spec_path() -> Path:
    return HERE / "platform.yaml"


@pytest.fixture(scope="session")
def cluster_platform(cluster_spec_path):
    from jupyterhub_gpu.spec.parse import load_platform

    return load_platform(cluster_spec_path)


@pytest.fixture(scope="session")
def cluster(cluster_platform):
    from jupyterhub_gpu.devcluster import build, cluster as devcluster

    from .. import z2jh_chart

    if not build.is_built():
        pytest.fail("the control plane is not built: run `jupyterhub-gpu devcluster build` "
                    "(make test does)")
    chart = (z2jh_chart.user_scheduler(z2jh_chart.helm_template(build.binaries()["helm"]))
             if z2jh_chart.CHART.is_dir() else None)
    status = devcluster.up(cluster_platform, STATE_DIR, ports=TEST_PORTS,
                           user_scheduler=chart[1] if chart else None)
    status["user_scheduler"] = chart[0] if chart else None
    try:
        hub_rbac.give_the_hub_its_identity(STATE_DIR, cluster_platform, HUB_KUBECONFIG)
        namespaces = (*(t.namespace for t in cluster_platform.teams), *OTHER_NAMESPACES)
        FRESH["cluster"] = reset.snapshot(hub_rbac.admin_client(STATE_DIR)[0], namespaces)
        yield status
    finally:
        devcluster.down(STATE_DIR, progress=lambda m: None)


@pytest.fixture(scope="module", autouse=True)
def fresh_cluster_after_each_file():
    # autouse: set up before the file's other module fixtures, so torn down after them
    yield
    if "cluster" in FRESH:  # else no test of the file brought it up
        left = reset.reset(hub_rbac.admin_client(STATE_DIR)[0], FRESH["cluster"])
        print("the file left (deleted):", *left, sep="\n  ")  # shown by pytest -rP


@pytest.fixture(scope="session")
def hub_kubeconfig(cluster) -> Path:
    return HUB_KUBECONFIG


class Kube:
    def __init__(self, api_client):
        from kubernetes_asyncio import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    async def workloads(self, namespace: str) -> list[dict]:
        listing = await self.custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")
        return listing["items"]

    async def workload_for(self, pod) -> dict | None:
        for wl in await self.workloads(pod.metadata.namespace):
            if wl["metadata"].get("labels", {}).get("kueue.x-k8s.io/job-uid") == pod.metadata.uid:
                return wl
        return None

    async def spawner_pod(self, spawner):
        """The spawner's pod, or None while it is not created yet."""
        from kubernetes_asyncio.client import ApiException

        try:
            return await self.core.read_namespaced_pod(spawner.pod_name, spawner.namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def pool_nodes(self, pool: str) -> list:
        """The nodes Karpenter started for ``pool`` (its NodePool has the pool's name)."""
        return (await self.core.list_node(label_selector=f"{NODEPOOL_LABEL}={pool}")).items

    async def node_claims(self, pool: str) -> list[dict]:
        listing = await self.custom.list_cluster_custom_object(
            *KARPENTER, "nodeclaims", label_selector=f"{NODEPOOL_LABEL}={pool}")
        return listing["items"]

    async def pool_is_empty(self, pool: str) -> bool:
        return not await self.pool_nodes(pool) and not await self.node_claims(pool)

    async def set_node_limit(self, pool: str, nodes: int | str) -> None:
        await self.custom.patch_cluster_custom_object(
            *KARPENTER, "nodepools", pool, {"spec": {"limits": {"nodes": str(nodes)}}},
            _content_type="application/merge-patch+json")

    async def restore_node_limit(self, pool) -> None:
        """Back to the limit ``devcluster up`` gave the pool's NodePool."""
        from jupyterhub_gpu.builders.karpenter import node_pool

        await self.set_node_limit(pool.name, node_pool(pool)["spec"]["limits"]["nodes"])


@pytest.fixture(scope="session")
async def kube(cluster):
    from kubernetes_asyncio import config

    api_client = await config.new_client_from_config(config_file=cluster["kubeconfig"])
    yield Kube(api_client)
    await api_client.close()


async def wait_for(check, timeout: float = 60, what: str = "condition", interval=0.2):
    """Await ``check()`` (sync or async) until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


@pytest.fixture
async def spawn(cluster, cluster_spec_path):
    from traitlets.config import Config

    from jupyterhub_gpu.hub.render import OfflineHub, OfflineUser, _Group
    from jupyterhub_gpu.hub.spawner import GPUSpawner

    started: list[GPUSpawner] = []

    async def start(user, groups, profile, wait=True, config=None):
        cfg = Config()
        cfg.GPUSpawner.platform_file = str(cluster_spec_path)
        cfg.GPUSpawner.start_timeout = 300
        if cluster["user_scheduler"]:  # as the chart's jupyterhub_config.py sets it
            cfg.KubeSpawner.scheduler_name = cluster["user_scheduler"]
        if config is not None:  # e.g. the z2jh chart's (tests/z2jh_chart.py)
            cfg.merge(config)
        spawner = GPUSpawner(user=OfflineUser(user, [_Group(g) for g in groups]),
                             hub=OfflineHub(), config=cfg)
        spawner.user_options = {"profile": profile}
        await spawner._run_apply_user_options(spawner.user_options)
        started.append(spawner)
        # as JupyterHub's User.spawn does: the start gets the spawner's start_timeout
        # (the profile's queue patience plus its start timeout), then it is cancelled
        task = asyncio.ensure_future(asyncio.wait_for(spawner.start(), spawner.start_timeout))
        if wait:
            await task
            return spawner
        return spawner, task

    yield start
    for spawner in started:
        await spawner.stop(now=True)


@pytest.fixture
async def pod_history(kube, cluster_platform):
    """``{namespace/name: [pod dict, ...]}`` of every pod event in the team namespaces."""
    from kubernetes_asyncio import watch

    history: dict[str, list[dict]] = defaultdict(list)

    async def follow(namespace, since):  # every change after the listing
        w = watch.Watch()
        async with w.stream(kube.core.list_namespaced_pod, namespace=namespace,
                            resource_version=since) as events:
            async for event in events:
                pod = event["raw_object"]
                history[f"{namespace}/{pod['metadata']['name']}"].append(pod)

    tasks = []
    for team in cluster_platform.teams:
        listed = await kube.core.list_namespaced_pod(team.namespace)
        tasks.append(asyncio.create_task(follow(team.namespace,
                                                listed.metadata.resource_version)))
    yield history
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
