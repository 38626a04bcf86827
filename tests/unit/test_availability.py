"""Live availability (pure): free units, room on CPU machines, the queue, the typical
wait, a new machine. Nodes are the dev cluster's (as AKS and GPU feature discovery
present them, :func:`jupyterhub_gpu.builders.nodes.fake_node`), pods the exact
manifests GPUSpawner creates (:func:`jupyterhub_gpu.hub.render.render_pod`), then moved
through Kueue's gate and the scheduler's binding as the API server would show them."""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.hub.availability import (Cluster, QueueWait, TeamNow, pending,
                                             typical_waits, user_availability)
from jupyterhub_gpu.hub.rooms import pool_rooms
from jupyterhub_gpu.builders.nodes import fake_node
from jupyterhub_gpu.spec.grant import UserRef
from jupyterhub_gpu.contract import ADMISSION_GATE, JOB_UID_LABEL, KARPENTER_DISRUPTED_TAINT
from jupyterhub_gpu.hub.render import render_pod

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
ALICE = UserRef("alice", frozenset({"data-science"}))


def node(platform, pool: str, index: int = 0, ready: str | None = "True", **changes) -> dict:
    obj = fake_node(platform.pool(pool), index)
    obj["status"]["conditions"] = [] if ready is None else [{"type": "Ready", "status": ready}]
    for key, value in changes.items():
        section, field = key.split("__")
        obj.setdefault(section, {})[field] = value
    return obj


@pytest.fixture(scope="module")
async def manifests(example_spec_path, platform):
    """One rendered pod per profile (for a user of a group allowed it)."""
    pods = {}
    for profile in platform.profiles:
        group = (profile.allowed_groups or platform.teams[0].groups)[0]
        pods[profile.slug] = await render_pod(str(example_spec_path), "alice", [group],
                                              profile.slug)
    return pods


def gated(manifests, slug: str, uid: str, user: str = "alice") -> dict:
    """As Kueue's webhook leaves it: gated until its Workload is admitted."""
    pod = copy.deepcopy(manifests[slug])
    pod["metadata"].update(name=f"jupyter-{user}-{uid}", uid=uid)
    pod["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
    pod["status"] = {"phase": "Pending"}
    return pod


def admitted(manifests, slug: str, uid: str, **kw) -> dict:
    pod = gated(manifests, slug, uid, **kw)
    pod["spec"]["schedulingGates"] = []
    return pod


def running(manifests, slug: str, uid: str, on: dict, **kw) -> dict:
    pod = admitted(manifests, slug, uid, **kw)
    pod["spec"]["nodeName"] = on["metadata"]["name"]
    pod["status"] = {"phase": "Running"}
    return pod


def workload(pod: dict, queue: str = "data-science", admitted: bool = False) -> dict:
    reserved = {"type": "QuotaReserved", "status": "True" if admitted else "False",
                "reason": "QuotaReserved" if admitted else "Pending"}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"pod-{pod['metadata']['name']}-{pod['metadata']['uid'][:5]}",
                         "namespace": pod["metadata"]["namespace"],
                         "labels": {JOB_UID_LABEL: pod["metadata"]["uid"]}},
            "spec": {"queueName": queue, "priority": 1000},
            "status": {"conditions": [reserved]}}


def by_slug(found) -> dict:
    return {a.slug: a for a in found}


def test_free_units_are_the_ready_nodes_less_what_notebooks_hold(platform, manifests):
    t4a, t4b = node(platform, "t4dev", 0), node(platform, "t4dev", 1)
    pods = [running(manifests, "t4-shared", f"u{i}", t4a) for i in range(3)]
    pods.append(admitted(manifests, "t4-shared", "u3"))  # admitted, not bound yet
    pods.append(gated(manifests, "t4-shared", "u4"))  # waits: holds nothing
    rooms = pool_rooms(platform, [t4a, t4b], pods)
    assert (rooms["t4dev"].total, rooms["t4dev"].free) == (8, 4)  # 8 shares - 3 - 1
    assert rooms["t4dev"].node_free == (1, 4)
    assert (rooms["a100mig"].total, rooms["a100mig"].ready_nodes) == (0, 0)


def test_finished_and_other_pools_pods_hold_nothing(platform, manifests):
    t4 = node(platform, "t4dev")
    done = running(manifests, "t4-shared", "u1", t4)
    done["status"]["phase"] = "Succeeded"
    elsewhere = running(manifests, "a100-mig-3g", "u2", node(platform, "a100mig"))
    assert pool_rooms(platform, [t4], [done, elsewhere])["t4dev"].free == 4


def test_a_mig_pool_counts_slices_as_the_device_plugin_advertises_them(platform, manifests):
    """The single MIG strategy: each slice is one nvidia.com/gpu, yet the user reads
    MIG slices."""
    mig = node(platform, "a100mig")
    assert mig["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    found = by_slug(user_availability(
        platform, ALICE, Cluster([mig], [running(manifests, "a100-mig-3g", "u1", mig)], []),
        [], NOW))["a100-mig-3g"]
    assert (found.free, found.total, found.unit, found.room_now) == (1, 2, "MIG slice", True)
    assert found.words[0] == "1 of 2 MIG slices free"


@pytest.mark.parametrize("changes,ready,state", [
    ({}, None, "starting"),  # registered, not Ready yet
    ({}, "False", "starting"),
    ({}, "Unknown", "gone"),  # its kubelet stopped reporting
    ({"spec__unschedulable": True}, "True", "gone"),  # cordoned
    ({"spec__taints": [{"key": KARPENTER_DISRUPTED_TAINT, "effect": "NoSchedule"}]},
     "True", "gone"),  # Karpenter is removing it
    ({"metadata__deletionTimestamp": "2026-12-03T11:59:00Z"}, "True", "gone"),
])
def test_machines_that_take_no_notebook_now(platform, changes, ready, state):
    room = pool_rooms(platform, [node(platform, "t4dev", ready=ready, **changes)], [])["t4dev"]
    assert (room.total, room.ready_nodes) == (0, 0)
    assert room.starting_nodes == (1 if state == "starting" else 0)


def test_a_ready_gpu_node_without_its_gpu_resource_yet_is_starting(platform):
    fresh = node(platform, "a100mig")
    del fresh["status"]["allocatable"]["nvidia.com/gpu"]  # no device plugin yet
    room = pool_rooms(platform, [fresh], [])["a100mig"]
    assert (room.total, room.ready_nodes, room.starting_nodes) == (0, 0, 1)


def test_a_pool_at_zero_says_how_long_a_new_machine_takes(platform):
    found = by_slug(user_availability(platform, ALICE, Cluster([], [], []), [], NOW))
    t4 = found["t4-shared"]
    # t4dev's bootTime: a GPU pool's default, with the GPU Operator's driver install
    assert (t4.free, t4.total, t4.room_now, t4.new_machine_seconds) == (0, 0, False, 600)
    assert t4.words[:2] == ("No machine running now", "A new machine takes about 10 min")
    cpu = found["cpu"]
    assert (cpu.servers_fit, cpu.room_now, cpu.free) == (0, False, None)
    assert cpu.words[:2] == ("No machine running now", "A new machine takes about 5 min")


def test_a_full_pool_at_its_maximum_says_so(platform, manifests):
    pool = platform.pool("a100mig")
    nodes = [node(platform, "a100mig", i) for i in range(pool.max_nodes)]
    pods = [running(manifests, "a100-mig-3g", f"u{n}{i}", nd)
            for n, nd in enumerate(nodes) for i in range(2)]
    found = by_slug(user_availability(platform, ALICE, Cluster(nodes, pods, []), [], NOW))
    mig = found["a100-mig-3g"]
    assert (mig.free, mig.total, mig.at_max, mig.new_machine_seconds) == (0, 10, True, None)
    assert mig.words[:2] == ("0 of 10 MIG slices free", "The pool is at its maximum of 5 "
                             "machines: you wait for a server to stop")


def test_a_machine_already_starting_is_said(platform):
    found = by_slug(user_availability(platform, ALICE, Cluster(
        [node(platform, "t4dev", ready="False")], [], []), [], NOW))["t4-shared"]
    assert (found.machines_starting, found.new_machine_seconds) == (1, 600)
    assert found.words[1] == "A new machine is starting (about 10 min)"


def test_a_cpu_profile_counts_the_servers_that_fit_on_running_machines(platform, manifests):
    """Standard_D8s_v5: 8 vCPU, 32 GiB; less kube-reserved and the daemonsets' 0.5 CPU and
    1.5 GiB, two 2-CPU 8-GiB servers leave room for one more (memory: ~27 GiB left)."""
    cpu_node = node(platform, "cpu")
    pods = [running(manifests, "cpu", f"u{i}", cpu_node) for i in range(2)]
    found = by_slug(user_availability(platform, ALICE, Cluster([cpu_node], pods, []), [],
                                      NOW))["cpu"]
    profile = platform.profile("cpu")
    assert (profile.cpu, profile.memory_bytes) == (2, 8 * 2**30)
    assert (found.servers_fit, found.room_now, found.machines_ready) == (1, True, 1)
    assert found.words[0] == "Room for 1 more on running machines"
    pods.append(running(manifests, "cpu", "u2", cpu_node))
    full = by_slug(user_availability(platform, ALICE, Cluster([cpu_node], pods, []), [],
                                     NOW))["cpu"]
    assert (full.servers_fit, full.room_now, full.new_machine_seconds) == (0, False, 300)
    assert full.words[:2] == ("No room on a running machine", "A new machine takes about 5 min")


def test_requests_waiting_in_the_users_queue(platform, manifests):
    t4 = node(platform, "t4dev")
    mine = [gated(manifests, "a100-mig-3g", "w1"), gated(manifests, "t4-shared", "w2"),
            running(manifests, "t4-shared", "r1", t4)]
    workloads = [workload(mine[0]), workload(mine[1]), workload(mine[2], admitted=True),
                 workload(gated(manifests, "a100-mig-3g", "x"), queue="ml-eng")]
    found = by_slug(user_availability(platform, ALICE, Cluster([t4], mine, workloads), [],
                                      NOW))
    assert (found["a100-mig-3g"].waiting, found["a100-mig-3g"].queue_waiting) == (1, 2)
    assert (found["cpu"].waiting, found["cpu"].queue_waiting) == (0, 2)
    assert "1 request waiting in your queue (data-science)" in found["a100-mig-3g"].words
    assert "Nobody waiting in your queue (data-science)" in found["cpu"].words
    assert [w["metadata"]["labels"][JOB_UID_LABEL] for w in pending(workloads, "data-science")
            ] == ["w1", "w2"]


def test_the_typical_wait_is_the_median_of_the_last_seven_days():
    waits = [QueueWait(NOW - timedelta(hours=h), "data-science", "t4-shared", s)
             for h, s in ((1, 30), (2, 600), (30, 90), (24 * 8, 5000))]  # the last: too old
    waits += [QueueWait(NOW, "ml-eng", "t4-shared", 1), QueueWait(NOW, "data-science", "cpu", 1)]
    assert typical_waits(waits, "data-science", NOW) == {"t4-shared": (90, 3), "cpu": (1, 1)}
    assert typical_waits(waits, "experimentation", NOW) == {}


def test_the_typical_wait_in_words(platform):
    waits = [QueueWait(NOW, "data-science", "t4-shared", s) for s in (100, 200, 260)]
    waits += [QueueWait(NOW, "data-science", "cpu", 0.2)]
    found = by_slug(user_availability(platform, ALICE, Cluster([], [], []), waits, NOW))
    assert "Typical wait: about 3 min (median of 3 requests in the last 7 days)" in found["t4-shared"].words
    assert "Typical wait: no wait (median of 1 request in the last 7 days)" in found["cpu"].words
    assert ("No queue wait recorded in the last 7 days"
            in found["a100-mig-3g"].words)


def test_the_teams_quota_in_use(platform, manifests):
    t4 = node(platform, "t4dev")
    pods = [running(manifests, "t4-shared", "u1", t4), admitted(manifests, "t4-shared", "u2")]
    other_team = running(manifests, "t4-shared", "u3", t4)
    other_team["metadata"]["namespace"] = "jhub-ml-eng"
    found = by_slug(user_availability(platform, ALICE, Cluster([t4], [*pods, other_team], []),
                                      [], NOW))["t4-shared"]
    assert (found.quota_used, found.quota, found.free) == (2, 8, 1)
    assert "Your team: 2 of its 8 shares in use" in found.words


def test_only_the_profiles_the_users_groups_allow_in_the_forms_order(platform):
    slugs = [a.slug for a in user_availability(platform, ALICE, Cluster([], [], []), [], NOW)]
    assert slugs == [p.slug for p in platform.profiles_for(ALICE.groups)]
    assert slugs[0] == "cpu" and "a100-training" not in slugs
    assert user_availability(platform, UserRef("eve", frozenset({"visitors"})),
                             Cluster([], [], []), [], NOW) == []


def test_without_the_watches_nothing_is_made_up(platform):
    found = by_slug(user_availability(platform, ALICE, Cluster(None, None, None), [], NOW))
    t4 = found["t4-shared"]
    assert (t4.free, t4.total, t4.room_now, t4.waiting, t4.quota_used) == (None,) * 5
    assert t4.words[0] == "Free machines unknown right now"
    assert not any("waiting" in w for w in t4.words)


def test_a_fallback_profile_sums_over_its_pools(platform, manifests):
    """A profile with ``pools: [a100spot, a100]`` counts the free GPUs of both, in its
    order; a pod of the fallback pools holds room where Kueue bound it."""
    spot, demand = node(platform, "a100spot"), node(platform, "a100")
    ml = UserRef("bob", frozenset({"ml-eng"}))
    holds = running(manifests, "a100-spot", "u1", spot)
    found = by_slug(user_availability(platform, ml, Cluster([spot, demand], [holds], []),
                                      [], NOW))
    assert found["a100-training"].pools == ("a100spot", "a100")
    assert (found["a100-training"].free, found["a100-training"].total) == (1, 2)
    assert (found["a100-spot"].free, found["a100-spot"].total) == (0, 1)


def test_as_json_is_plain_data(platform):
    import json

    found = user_availability(platform, ALICE, Cluster([], [], []), [], NOW)
    data = json.loads(json.dumps([a.as_json() for a in found]))
    assert data[0]["slug"] == "cpu" and data[0]["words"][0] == "No machine running now"



class CountingList(list):
    """Pods that count how often they are read through."""

    reads = 0

    def __iter__(self):
        CountingList.reads += 1
        return super().__iter__()


def test_the_pods_are_read_a_few_times_per_answer_not_per_profile(platform, manifests):
    """TeamNow reads the pods once for the pools' room, once for the team's quota and
    once for the pending requests' profiles, however many profiles the user may start."""
    t4 = node(platform, "t4dev")
    pods = CountingList([running(manifests, "t4-shared", f"u{i}", t4) for i in range(3)])
    wanted = [gated(manifests, "t4-shared", "w1")]
    CountingList.reads = 0
    found = user_availability(platform, ALICE, Cluster([t4], pods, [workload(wanted[0])]),
                              [], NOW)
    assert len(found) == 3 and CountingList.reads <= 3  # before: 1 + one per profile, or more


async def test_a_teams_answer_is_reused_within_its_ttl():
    from jupyterhub_gpu.hub.api import CACHE_SECONDS, TeamCache

    now = [100.0]
    computed = []

    async def compute():
        computed.append(now[0])
        await asyncio.sleep(0)
        return len(computed)

    cache = TeamCache(clock=lambda: now[0])
    assert await cache.get("data-science", compute) == 1
    now[0] += CACHE_SECONDS / 2
    assert await cache.get("data-science", compute) == 1, "within the TTL: not recomputed"
    assert await cache.get("ml-eng", compute) == 2, "per team"
    now[0] += CACHE_SECONDS
    both = await asyncio.gather(cache.get("data-science", compute),
                                cache.get("data-science", compute))
    assert both == [3, 3] and len(computed) == 3, "callers meanwhile share one computation"
    assert set(cache._values) == {"data-science"}, "the expired team's entry is dropped"


def test_the_pools_room_is_computed_once_per_change_of_the_watches(platform, manifests,
                                                                   monkeypatch):
    """Every team's answer between two changes of the nodes and pods watched reads them
    once (the hub builds new lists of the same objects per answer); a pod changed (a
    new object in its place) or another node is read again, alone, and the room summed
    again; each team's answer is the one computed from scratch."""
    from jupyterhub_gpu.hub import rooms
    from jupyterhub_gpu.hub.api import LastCluster, team_of

    t4 = node(platform, "t4dev")
    pods = [running(manifests, "t4-shared", f"u{i}", t4) for i in range(3)]
    other = copy.deepcopy(pods[0])
    other["metadata"]["namespace"] = next(t.namespace for t in platform.teams
                                          if t.name != "data-science")
    pods.append(other)
    wanted = gated(manifests, "t4-shared", "w1")
    sums = []
    real = rooms.rooms_of
    monkeypatch.setattr(rooms, "rooms_of", lambda *a: sums.append(1) or real(*a))
    last = LastCluster()

    def answers(nodes, pods_):
        return {team.name: team_of(platform, team, Cluster(list(nodes), list(pods_),
                                                           [workload(wanted)]), last)
                for team in platform.teams}

    first = answers([t4], [*pods, wanted])
    assert answers([t4], [*pods, wanted]) == first
    assert (len(sums), last.read) == (1, 6), "one node and five pods, read once"
    assert first == {team.name: TeamNow.of(
        platform, team, Cluster([t4], [*pods, wanted], [workload(wanted)]))
        for team in platform.teams}
    assert first["data-science"].used == {"t4dev": 3}
    assert first["data-science"].pending_pools == (frozenset({"t4dev"}),)
    sums.clear()
    changed = [copy.deepcopy(pods[0]), *pods[1:], wanted]
    changed[0]["status"]["phase"] = "Succeeded"
    assert answers([t4], changed)["data-science"].used == {"t4dev": 2}
    assert (len(sums), last.read) == (1, 7)
    answers([t4, node(platform, "t4dev", 1)], changed)
    assert (len(sums), last.read) == (2, 8)


async def test_the_typical_waits_are_taken_again_after_a_write(platform, tmp_path):
    """Reused while the hub writes nothing to the ledger (one query for many answers),
    taken again after a write: the new wait is counted at once."""
    from jupyterhub_gpu.hub.api import TeamCache, typical_waits
    from jupyterhub_gpu.ledger.store import Kind, Ledger, Usage

    team = next(t for t in platform.teams if t.name == "data-science")
    ledger = Ledger(f"sqlite:///{tmp_path}/usage.sqlite")
    t = NOW - timedelta(hours=1)

    def wait(key, s):
        return Usage(key, Kind.SESSION, team=team.name, profile="t4", requested_at=t,
                     admitted_at=t + timedelta(seconds=s))
    await ledger.record(wait("a", 10))
    reads = []
    real = ledger.median_waits_sync
    ledger.median_waits_sync = lambda *a: reads.append(1) or real(*a)
    cache = TeamCache(60)
    for _ in range(3):
        assert await typical_waits(ledger, team, NOW, cache) == {"t4": (10.0, 1)}
    assert len(reads) == 1
    await ledger.record(wait("b", 30))
    assert await typical_waits(ledger, team, NOW, cache) == {"t4": (20.0, 2)}
    assert len(reads) == 2
    ledger.dispose()
