"""[autoscale] Scale to zero for real: Karpenter (kwok provider) adds a pool's node when
Kueue admits a notebook that needs one and removes it once the notebook is gone.

The whole loop runs through a real JupyterHub and the real idle culler; the other tests
drive GPUSpawner directly. Timings are measured and printed, never asserted.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from pathlib import Path

import pytest

from jupyterhub_gpu import contract
from jupyterhub_gpu.devcluster import contract as dev_contract
from jupyterhub_gpu.builders import karpenter
from jupyterhub_gpu.devcluster import demo

from jupyterhub_gpu.kueue.status import ADMISSION_GATE
from jupyterhub_gpu.contract import AGENTPOOL_LABEL

from .conftest import HUB, KARPENTER, NODEPOOL_LABEL, wait_for
from .test_demo import URL, _hub_server, _login_session, _login_when_up, _pod_gone, _xsrf
from .test_queue_lifecycle import _collect_progress

EMPTY_TIMEOUT = 240  # Karpenter needs >= ~25-40 s to remove an empty node


def _ready(node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


async def _node_of(kube, spawner) -> str:
    pod = await kube.core.read_namespaced_pod(spawner.pod_name, spawner.namespace)
    return pod.spec.node_name


async def _empty(kube, *pools) -> None:
    for pool in pools:
        await wait_for(lambda p=pool: kube.pool_is_empty(p), timeout=EMPTY_TIMEOUT,
                       what=f"pool {pool} to have no node", interval=1)


def _report(capsys, lines: list[str]) -> None:
    with capsys.disabled():
        print("\n" + "\n".join(f"  measured: {line}" for line in lines))


async def test_pools_start_at_min_nodes_with_a_node_pool_each(cluster, kube, cluster_platform):
    nodes = (await kube.core.list_node()).items
    static = [n.metadata.name for n in nodes if NODEPOOL_LABEL not in (n.metadata.labels or {})]
    assert len(static) == sum(p.min_nodes for p in cluster_platform.pools) == 0, static
    listing = await kube.custom.list_cluster_custom_object(*KARPENTER, "nodepools")
    node_pools = {np["metadata"]["name"]: np for np in listing["items"]}
    assert set(node_pools) == {p.name for p in cluster_platform.pools}
    for pool in cluster_platform.pools:
        status = node_pools[pool.name]["status"]
        assert {"type": "Ready", "status": "True"}.items() <= next(
            c for c in status["conditions"] if c["type"] == "Ready").items()
        assert node_pools[pool.name]["spec"]["limits"] == {
            "nodes": str(pool.max_nodes - pool.min_nodes)}


@pytest.mark.slow
async def test_the_loop_spawn_node_run_idle_cull_node_gone(cluster, cluster_spec_path,
                                                           cluster_platform, kube, hub_kubeconfig,
                                                           tmp_path, capsys):
    """Spawn; Kueue admits; Karpenter adds a node of the right pool; the server runs,
    goes idle; the real culler (jupyterhub-idle-culler with the jupyterhub_gpu.cull hook,
    as a hub service) stops it; Karpenter removes the node; the pool is back at 0.

    All along, the hub's ``jupyterhub_gpu_pool_nodes`` for the pool (its one node watch,
    with the hub's shipped RBAC) reads 0 nodes, then the new node Ready, then 0: the
    hub starts the watch as the spawn starts, before the pod exists, and the node comes
    seconds later (the gauge is sampled every 0.2 s)."""
    from jupyterhub_gpu.devcluster.podrunner import PodRunner

    pool = cluster_platform.pool("t4dev")
    await _empty(kube, pool.name)
    demo.ensure_chp(progress=lambda m: None)
    runner = asyncio.create_task(PodRunner(Path(cluster["kubeconfig"]), tmp_path).run())
    hub = await demo.start_hub(cluster_spec_path, hub_kubeconfig, tmp_path, URL,
                               **HUB.start_args(),
                               extra_env={"JUPYTERHUB_GPU_DEMO_CULL_EVERY": "3"})
    carol = admin = sampler = None
    gauge: list[tuple[int, int]] = []  # the pool's (ready, not ready), as it changes
    try:
        carol = await _login_when_up("carol")  # experimentation
        admin = await _login_session("admin")  # the admin role may read:metrics
        assert pool.name not in await _pool_nodes_gauge(admin), "no node watch before a spawn"
        sampler = asyncio.create_task(_follow_gauge(admin, pool.name, gauge))
        spawned = time.monotonic()
        async with carol.post(f"{URL}/hub/spawn", data={"profile": "t4-quick",
                                                       "_xsrf": _xsrf(carol)}) as r:
            assert r.status == 200
        pod = await wait_for(lambda: _admitted(kube, "jhub-experimentation", "jupyter-carol"),
                             timeout=60, what="Kueue to admit carol's pod")
        admitted = time.monotonic()
        node = await wait_for(lambda: _ready_pool_node(kube, pool.name), timeout=120,
                              what="Karpenter to add a Ready t4dev node")
        node_ready = time.monotonic()
        labels = node.metadata.labels
        assert labels[AGENTPOOL_LABEL] == "t4dev" and labels[NODEPOOL_LABEL] == "t4dev"
        assert labels[contract.CAPACITY_TYPE_LABEL] == "on-demand"
        assert labels[contract.INSTANCE_TYPE_LABEL] == karpenter.instance_type_name(pool)
        assert node.status.allocatable[pool.resource_name] == "4"
        await wait_for(lambda: gauge and gauge[-1] == (1, 0), what="the gauge to show the node")
        bound = await wait_for(lambda: _running_on(kube, pod, node.metadata.name), timeout=60,
                               what="carol's pod to run on the new node")
        assert bound.metadata.uid == pod.metadata.uid
        hub_log = tmp_path / "hub.log"
        # The server is up once the hub says so (the culler may stop it a moment later:
        # idleTimeout 10 s counts from the spawn).
        await wait_for(lambda: "User carol took" in hub_log.read_text(), timeout=120,
                       what="the hub to report carol's server started")
        running = time.monotonic()
        await wait_for(lambda: _no_server(carol, "carol"), timeout=90,
                       what="the culler to stop carol's server")
        culled = time.monotonic()
        await wait_for(lambda: _pod_gone(kube, "jhub-experimentation", "jupyter-carol"),
                       timeout=60, what="carol's pod and Workload to go")
        pod_gone = time.monotonic()
        log = hub_log.read_text()
        assert "Adding user carol to proxy /user/carol/" in log
        assert "Culling user=carol server='' profile=t4-quick reason=idle" in log
        _check_ledger(tmp_path / "hub", pod.metadata.uid, pool)
        await wait_for(lambda: kube.pool_is_empty(pool.name), timeout=EMPTY_TIMEOUT,
                       what="Karpenter to remove the empty node", interval=0.5)
        node_gone = time.monotonic()
        assert await kube.pool_nodes(pool.name) == []
        await wait_for(lambda: gauge[-1] == (0, 0), what="the gauge back at 0 nodes")
        assert gauge[0] == (0, 0) and (1, 0) in gauge, gauge
        assert max(ready + not_ready for ready, not_ready in gauge) == 1, gauge
        _report(capsys, [
            f"bootTime {pool.boot_seconds}s, consolidateAfter {pool.consolidate_after_seconds}s,"
            " idleTimeout 10s, culler every 3s",
            f"spawn -> admitted {admitted - spawned:.1f}s, -> node Ready "
            f"{node_ready - spawned:.1f}s, -> server up {running - spawned:.1f}s",
            f"server up -> culled {culled - running:.1f}s; pod gone -> node gone "
            f"{node_gone - pod_gone:.1f}s (culled -> node gone {node_gone - culled:.1f}s)",
            f"jupyterhub_gpu_pool_nodes of {pool.name} (ready, not ready) as it changed: "
            f"{gauge}"])
    finally:
        if sampler:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        for session in (carol, admin):
            if session:
                await session.close()
        hub.terminate()
        await hub.wait()
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def _pool_nodes_gauge(http) -> dict[str, tuple[int, int]]:
    """``jupyterhub_gpu_pool_nodes`` from the hub's ``/hub/metrics``: pool -> (ready,
    not ready)."""
    from prometheus_client.parser import text_string_to_metric_families

    async with http.get(f"{URL}/hub/metrics") as r:
        assert r.status == 200, r.status
        text = await r.text()
    counts: dict[str, list[int]] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "jupyterhub_gpu_pool_nodes":
            for sample in family.samples:
                ready = sample.labels["ready"] == "true"
                counts.setdefault(sample.labels["pool"], [0, 0])[0 if ready else 1] = int(
                    sample.value)
    return {pool: (ready, not_ready) for pool, (ready, not_ready) in counts.items()}


async def _follow_gauge(http, pool: str, seen: list[tuple[int, int]]) -> None:
    """Append the pool's gauge to ``seen`` whenever it changes, until cancelled."""
    while True:
        value = (await _pool_nodes_gauge(http)).get(pool)
        if value is not None and (not seen or seen[-1] != value):
            seen.append(value)
        await asyncio.sleep(0.2)


async def _admitted(kube, namespace, name):
    pods = await kube.core.list_namespaced_pod(namespace)
    pod = next((p for p in pods.items if p.metadata.name == name), None)
    if pod is None or pod.spec.scheduling_gates:
        return None
    workload = await kube.workload_for(pod)
    admitted = workload and any(c["type"] == "Admitted" and c["status"] == "True"
                                for c in workload["status"].get("conditions", []))
    return pod if admitted else None


async def _running_on(kube, pod, node_name):
    found = await kube.core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
    return found if found.spec.node_name == node_name and found.status.phase == "Running" else None


async def _ready_pool_node(kube, pool):
    return next((n for n in await kube.pool_nodes(pool) if _ready(n)), None)


async def _no_server(http, user):
    return (await _hub_server(http, user)) is None


async def test_four_users_share_one_node_and_the_fifth_gets_a_second(spawn, kube):
    await _empty(kube, "t4dev")  # 4 shares a node, at most 2 nodes
    four = await asyncio.gather(*(spawn(user, ["data-science"], "t4-shared")
                                  for user in ("amy", "ben", "cat", "dan")))
    (shared,) = {await _node_of(kube, s) for s in four}
    assert [n.metadata.name for n in await kube.pool_nodes("t4dev")] == [shared]
    fifth = await spawn("eve", ["ml-eng"], "t4-shared")
    second = await _node_of(kube, fifth)
    assert second != shared
    assert sorted(n.metadata.name for n in await kube.pool_nodes("t4dev")) == sorted(
        [shared, second])


async def test_scale_up_never_passes_max_nodes(spawn, kube, cluster_platform):
    """a100mig: one node of 2 slices at most, 3 slices of quota. The third admitted slice
    stays pending: Karpenter says the pool's limit is reached and adds no node."""
    pool = cluster_platform.pool("a100mig")
    await spawn("fox", ["data-science"], "a100-mig-3g")
    await spawn("gil", ["ml-eng"], "a100-mig-3g")
    third, started = await spawn("hex", ["ml-eng"], "a100-mig-3g", wait=False)
    event = await wait_for(lambda: _karpenter_event(kube, third, "FailedScheduling"),
                           timeout=120, what="Karpenter to give up on the third slice")
    assert "node limits have been exhausted for nodepool (NodePool=a100mig)" in event.message, \
        event.message
    assert len(await kube.pool_nodes(pool.name)) == pool.max_nodes == 1
    assert len(await kube.node_claims(pool.name)) == pool.max_nodes
    pod = await kube.core.read_namespaced_pod(third.pod_name, third.namespace)
    assert not pod.spec.scheduling_gates and pod.spec.node_name is None, "admitted, no node"
    assert not started.done()


async def _karpenter_event(kube, spawner, reason):
    pod = await kube.spawner_pod(spawner)
    if pod is None:
        return None
    events = await kube.core.list_namespaced_event(
        spawner.namespace, field_selector=f"involvedObject.uid={pod.metadata.uid}")
    return next((e for e in events.items if e.reason == reason
                 and "karpenter" in (e.source.component or e.reporting_component or "")), None)


async def test_spot_profile_lands_on_a_spot_node(spawn, kube, cluster_platform):
    pool = cluster_platform.pool("a100spot")
    spawner = await spawn("ivy", ["ml-eng"], "a100-spot")
    node = await kube.core.read_node(await _node_of(kube, spawner))
    labels = node.metadata.labels
    assert labels[contract.CAPACITY_TYPE_LABEL] == "spot"
    assert labels[NODEPOOL_LABEL] == labels[AGENTPOOL_LABEL] == "a100spot"
    assert karpenter.template_labels(pool).items() <= labels.items()
    assert labels[dev_contract.PRICE_LABEL] == f"{pool.price_per_node_hour:f}", "the spec's price"
    taints = {(t.key, t.value, t.effect) for t in node.spec.taints or []}
    assert {(t.key, t.value, t.effect) for t in pool.taints} <= taints


async def test_queued_spawn_whose_queue_is_full_starts_no_node(spawn, kube):
    """ml-eng has 1 GPU of a100spot quota and the pool may grow to 2 nodes: the second
    spawn waits, gated, in the queue, and Karpenter (which only acts on pods the
    scheduler found unschedulable) adds no node for it."""
    await _empty(kube, "a100spot", "t4dev")
    await spawn("jax", ["ml-eng"], "a100-training")
    queued, started = await spawn("kai", ["ml-eng"], "a100-training", wait=False)
    await wait_for(lambda: _gated(kube, queued), what="the second spawn to be queued")
    # Karpenter provisions for every pending pod at once: once it has added a node for
    # a spawn made after the queued one, it has seen the queued one too.
    after = await spawn("lex", ["experimentation"], "t4-shared")
    assert (await kube.core.read_node(await _node_of(kube, after))).metadata.labels[
        NODEPOOL_LABEL] == "t4dev"
    assert len(await kube.pool_nodes("a100spot")) == 1
    assert len(await kube.node_claims("a100spot")) == 1
    assert await _gated(kube, queued) and not started.done()


async def _gated(kube, spawner):
    pod = await kube.spawner_pod(spawner)
    return pod is not None and ADMISSION_GATE in [g.name for g in pod.spec.scheduling_gates or []]


async def _set_boot(kube, node_class: dict) -> None:
    await kube.custom.patch_cluster_custom_object(
        contract.KWOK_NODE_CLASS_GROUP, "v1alpha1", "kwoknodeclasses",
        node_class["metadata"]["name"], {"spec": node_class["spec"]},
        _content_type="application/merge-patch+json")


async def test_the_user_reads_what_karpenter_does(spawn, kube, cluster_platform):
    """From Karpenter's real pod events: first the pool is at its limit (0 nodes
    allowed), then a machine is starting (its boot slowed to 20 s so the message is
    seen; the expected wait told is the spec's bootTime)."""
    pool = cluster_platform.pool("a100spot")
    await kube.set_node_limit(pool.name, 0)
    slow = karpenter.node_class(pool)
    slow["spec"]["nodeRegistrationDelay"] = "20s"
    await _set_boot(kube, slow)
    messages: list[str] = []
    try:
        await _empty(kube, pool.name)
        spawner, started = await spawn("noa", ["ml-eng"], "a100-spot", wait=False)
        await wait_for(lambda: spawner.queue_stage, what="the spawn to start watching")
        follower = asyncio.create_task(_collect_progress(spawner, messages))
        at_limit = ("No A100-80GB machine can be added to pool a100spot right now: it is at "
                    "its maximum size; still waiting for room")
        await wait_for(lambda: at_limit in messages, timeout=120, what="the at-limit message")
        await kube.restore_node_limit(pool)
        starting = ("Starting a new A100-80GB machine for pool a100spot; this usually takes "
                    f"about {pool.boot_seconds} seconds")
        await wait_for(lambda: starting in messages, timeout=120, what="the starting message")
        await asyncio.wait_for(started, 180)
        await asyncio.wait_for(follower, 10)
    finally:
        await kube.restore_node_limit(pool)
        await _set_boot(kube, karpenter.node_class(pool))
    assert messages.index(at_limit) < messages.index(starting) < len(messages) - 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_karpenter_that_cannot_read_its_instance_types_fails_to_start(cluster, tmp_path):
    """Karpenter only logs an instance-types file it cannot parse and runs on, offering
    nothing; `devcluster up` fails on that log line instead (here: the real binary,
    against the running cluster, on ports of its own, stopped at once)."""
    from jupyterhub_gpu.devcluster import components, procs, sources
    from jupyterhub_gpu.devcluster.layout import Layout, Ports

    layout = Layout(tmp_path)
    layout.make_dirs()
    shutil.copyfile(cluster["kubeconfig"], layout.kubeconfig)
    layout.karpenter_instance_types.write_text('{"name": "not a list"}\n')
    ports = Ports(karpenter_metrics=_free_port(), karpenter_health=_free_port())
    comp = components.karpenter(sources.binaries()["karpenter-kwok"], layout, ports)
    proc = procs.launch(comp, layout)
    try:
        with pytest.raises(procs.ComponentError) as info:
            await asyncio.to_thread(procs.wait_healthy, comp, proc, layout, None, 60)
    finally:
        proc.kill()
        proc.wait()
    message = str(info.value)
    first = message.splitlines()[0]
    assert first.startswith("karpenter logged 'failed constructing instance types' while "
                            "starting: {"), message
    assert "could not parse JSON data" in first, message


async def test_the_demo_shows_a_pools_machine_come_and_go(spawn, kube, cluster,
                                                          cluster_platform):
    """`make demo`'s live line per pool, from the real Nodes, NodeClaims and Pods."""
    from jupyterhub_gpu.devcluster.kube import AdminClient
    from jupyterhub_gpu.devcluster.pki import PkiPaths
    from jupyterhub_gpu.devcluster.poolwatch import watch_pools

    client = AdminClient(cluster["server"], PkiPaths(Path(cluster["state_dir"]) / "pki"))
    await _empty(kube, "a100mig")
    shown: list[str] = []
    watcher = asyncio.create_task(watch_pools(client, cluster_platform, shown.append, 0.5))

    def line(prefix: str):
        return next((part for lines in shown for part in lines.splitlines()
                     if part.startswith(prefix)), None)

    try:
        await wait_for(lambda: line("pool a100mig    0 nodes of at most 1; notebooks: 0 "
                                    "running"), what="the empty pool's line")
        spawner = await spawn("pia", ["data-science"], "a100-mig-3g")
        await wait_for(lambda: line("pool a100mig    1 node of at most 1; notebooks: 1 running"),
                       what="the pool's line with its new machine")
        await spawner.stop(now=True)
        await wait_for(lambda: shown[-1].splitlines()[1] == (
            "pool a100mig    0 nodes of at most 1; notebooks: 0 running, 0 waiting for a "
            "node, 0 queued"), timeout=EMPTY_TIMEOUT, what="the machine gone from the line")
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)


def _check_ledger(hub_dir: Path, uid: str, pool) -> None:
    """carol's session in the usage ledger: admitted to the pool, ran, culled as idle."""
    from jupyterhub_gpu.usage.config import default_url
    from jupyterhub_gpu.ledger.store import Ledger, StopReason

    ledger = Ledger(default_url(str(hub_dir)))
    rows = ledger.rows_sync()
    ledger.dispose()
    assert [r.key for r in rows] == [f"pod:{uid}"], rows
    (row,) = rows
    assert (row.user, row.team, row.profile, row.pool, row.gpu_units) == (
        "carol", "experimentation", "t4-quick", pool.name, 1), row
    assert row.price_per_unit_hour == pool.price_per_unit_hour
    assert row.stop_reason is StopReason.IDLE_CULL, row
    assert row.requested_at <= row.admitted_at <= row.running_at < row.stopped_at, row
