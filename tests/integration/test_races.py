"""Races on the real hub (the demo's, as the hub's ServiceAccount), each user with
their own API token (:mod:`.hubrest`):

- ten users ask for the last two MIG slices of a pool at the same instant: Kueue
  admits exactly two, and the eight others each read their own place in the queue, in
  Kueue's order, which the next admission follows;
- a user double-clicks Start (two REST posts, two form posts at once): one pod;
- a user stops a server just as Kueue admits it: nothing is left behind.

The kube-apiserver's audit log (:mod:`.audit`) counts the pods the hub created.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from . import hubrest
from .audit import AuditLog
from .conftest import STATE_DIR, wait_for
from .test_demo import URL, _login_session, _xsrf

MIG = "a100-mig-3g"  # a100mig: one node of two slices; ml-eng's quota is both
RACERS = [f"racer{i}" for i in range(10)]
POSITION = re.compile(r": position (\d+) of (\d+)$")


@pytest.fixture(scope="module")
async def racing_hub(cluster, cluster_spec_path, hub_kubeconfig, tmp_path_factory):
    async with hubrest.hub_with_tokens(cluster, cluster_spec_path, hub_kubeconfig,
                                       tmp_path_factory.mktemp("racing-hub")) as hub:
        yield hub


def _true(workload: dict, condition: str) -> bool:
    return any(c["type"] == condition and c["status"] == "True"
               for c in workload.get("status", {}).get("conditions", []))


def _owner(workload: dict) -> str | None:
    """The user whose notebook pod (``jupyter-<user>``) the Workload is for; None for
    another kind's (a training job an earlier test left in the namespace)."""
    pod = next((o["name"] for o in workload["metadata"].get("ownerReferences") or []
                if o["kind"] == "Pod"), None)
    return pod.removeprefix("jupyter-") if pod else None


async def _queue(kube, namespace: str) -> tuple[set[str], list[str]]:
    """(users admitted, users pending in Kueue's order: priority, creation, UID)."""
    workloads = [w for w in await kube.workloads(namespace)
                 if not _true(w, "Finished") and _owner(w) is not None]
    admitted = {_owner(w) for w in workloads if _true(w, "QuotaReserved")}
    pending = sorted((w for w in workloads if not _true(w, "QuotaReserved")),
                     key=lambda w: (-(w["spec"].get("priority") or 0),
                                    w["metadata"]["creationTimestamp"], w["metadata"]["uid"]))
    return admitted, [_owner(w) for w in pending]


def _read_positions(messages: dict[str, list[dict]], users) -> dict[str, tuple[int, int] | None]:
    """The place in the queue each user's spawn page shows now (its latest message)."""
    read = {}
    for user in users:
        latest = messages[user][-1]["message"] if messages[user] else ""
        match = POSITION.search(latest)
        read[user] = (int(match[1]), int(match[2])) if match else None
    return read


async def _until_queue_reads_right(kube, messages, admitted_count: int, timeout=180):
    """Wait until Kueue admits ``admitted_count`` and every pending user reads their
    place in Kueue's order; the admitted and pending users."""
    last = {}

    async def right():
        admitted, pending = await _queue(kube, "jhub-ml-eng")
        expected = {u: (i + 1, len(pending)) for i, u in enumerate(pending)}
        last.update(admitted=admitted, expected=expected,
                    read=_read_positions(messages, pending))
        return len(admitted) == admitted_count and last["read"] == expected

    try:
        await wait_for(right, timeout=timeout, what="the queue and what each user reads")
    except AssertionError as e:
        raise AssertionError(f"{e}: {last}") from None
    return last["admitted"], list(last["expected"])


async def _nothing_left(kube, namespace: str, users) -> bool:
    pods = [p.metadata.name for p in (await kube.core.list_namespaced_pod(namespace)).items]
    owners = {_owner(w) for w in await kube.workloads(namespace)}
    return not [u for u in users if f"jupyter-{u}" in pods or u in owners]


async def test_ten_users_race_for_the_last_two_slices(racing_hub, kube):
    http, token = racing_hub
    tokens = {u: await token(u, ("ml-eng",)) for u in RACERS}
    messages = {u: [] for u in RACERS}
    followers = []
    try:
        answers = await asyncio.gather(*(hubrest.start(http, u, tokens[u], {"profile": MIG})
                                         for u in RACERS))
        assert {status for status, _ in answers} <= {201, 202}, answers
        followers = [asyncio.create_task(hubrest.progress(http, u, tokens[u], messages[u]))
                     for u in RACERS]
        admitted, pending = await _until_queue_reads_right(kube, messages, 2)
        assert len(pending) == 8
        # the next slice goes to the user who read "position 1 of 8"
        leaving = sorted(admitted)[0]
        assert await hubrest.stop(http, leaving, tokens[leaving]) in (202, 204)
        admitted_now, pending_now = await _until_queue_reads_right(kube, messages, 2)
        assert admitted_now == admitted - {leaving} | {pending[0]}
        assert pending_now == pending[1:]
    finally:
        for task in followers:
            task.cancel()
        await asyncio.gather(*(hubrest.stop(http, u, tokens[u]) for u in RACERS))
        await wait_for(lambda: _nothing_left(kube, "jhub-ml-eng", RACERS), timeout=120,
                       what="every racer's pod and Workload to go")


async def _form_post(http, profile: str) -> int:
    async with http.post(f"{URL}/hub/spawn", data={"profile": profile,
                                                  "_xsrf": _xsrf(http)}) as r:
        await r.read()
        return r.status


async def _cookie_server(http, user: str) -> dict | None:
    async with http.get(f"{hubrest.API}/users/{user}",
                        headers={"X-XSRFToken": _xsrf(http)}) as r:
        return (await r.json())["servers"].get("")


async def test_a_double_click_on_start_makes_one_pod(racing_hub, kube):
    """bob posts twice to the REST API at once, carol submits the spawn form twice at
    once: each gets one server, and the hub asked the API server for one pod each."""
    http, token = racing_hub
    bob = await token("bob")  # ml-eng
    carol = await _login_session("carol")  # experimentation, through the form
    audit = AuditLog(STATE_DIR)
    start = await audit.fence(kube)
    try:
        rest, form = await asyncio.gather(
            asyncio.gather(*(hubrest.start(http, "bob", bob, {"profile": "t4-shared"})
                             for _ in range(2))),
            asyncio.gather(*(_form_post(carol, "t4-shared") for _ in range(2))))
        # the second click finds the spawn pending (202) or, if it already ended, running
        assert sorted(status for status, _ in rest) in ([201, 202], [202, 202], [201, 400],
                                                        [202, 400]), rest
        # Two form posts at once: the second gets the pending page (200), JupyterHub's
        # "carol is pending spawn" (400) or, when its spawn handler checked "pending"
        # before the first post's spawn task set it, its 500 page ("Unhandled error
        # starting server carol"), while the first spawn goes on. (In a browser,
        # JupyterHub's spawn page hides Start once the form is submitted.)
        assert 200 in form and set(form) <= {200, 400, 500}, form
        await wait_for(lambda: _ready(hubrest.server(http, "bob", bob)), timeout=120,
                       what="bob's server")
        await wait_for(lambda: _ready(_cookie_server(carol, "carol")), timeout=120,
                       what="carol's server")
        end = await audit.fence(kube)
        creates = sorted((r.namespace, r.name, r.code) for r in audit.between(start, end)
                         if r.verb == "create" and r.resource == "pods"
                         and r.namespace in ("jhub-ml-eng", "jhub-experimentation"))
        assert creates == [("jhub-experimentation", "jupyter-carol", 201),
                           ("jhub-ml-eng", "jupyter-bob", 201)]
        for namespace, user in (("jhub-ml-eng", "bob"), ("jhub-experimentation", "carol")):
            pods = (await kube.core.list_namespaced_pod(namespace)).items
            assert [p.metadata.name for p in pods] == [f"jupyter-{user}"]
    finally:
        await hubrest.stop(http, "bob", bob)
        async with carol.delete(f"{hubrest.API}/users/carol/server",
                                headers={"X-XSRFToken": _xsrf(carol)}):
            pass
        await carol.close()
        await wait_for(lambda: _nothing_left(kube, "jhub-ml-eng", ["bob"]), timeout=120,
                       what="bob's pod to go")
        await wait_for(lambda: _nothing_left(kube, "jhub-experimentation", ["carol"]),
                       timeout=120, what="carol's pod to go")


async def _ready(server) -> bool:
    server = await server
    return bool(server and server["ready"])


async def _cluster_queue_idle(kube, queue: str) -> bool:
    """No Workload pending, reserving or admitted in the ClusterQueue, no quota in use."""
    from .conftest import KUEUE

    cq = await kube.custom.get_cluster_custom_object(*KUEUE, "clusterqueues", queue)
    status = cq.get("status", {})
    used = [r for f in status.get("flavorsReservation", []) + status.get("flavorsUsage", [])
            for r in f["resources"] if str(r.get("total", "0")) not in ("0", "")]
    return (not used and not status.get("pendingWorkloads")
            and not status.get("reservingWorkloads") and not status.get("admittedWorkloads"))


async def test_a_stop_as_kueue_admits_leaves_nothing(racing_hub, kube):
    """alice holds data-science's one MIG slice (admitted) and dave waits for it. alice
    stops; the moment Kueue admits dave, dave stops (his spawn still pending at the
    hub): no pod, no Workload, no gated pod is left, and the queue's quota is free."""
    http, token = racing_hub
    tokens = {u: await token(u) for u in ("alice", "dave")}
    try:
        assert (await hubrest.start(http, "alice", tokens["alice"], {"profile": MIG}))[0] \
            in (201, 202)
        await wait_for(lambda: _admitted_users(kube, "alice"), timeout=120,
                       what="alice to hold the slice")
        assert (await hubrest.start(http, "dave", tokens["dave"], {"profile": MIG}))[0] == 202
        await wait_for(lambda: _pending_users(kube, "dave"), what="dave queued")
        assert await hubrest.stop(http, "alice", tokens["alice"]) in (202, 204)
        await wait_for(lambda: _admitted_users(kube, "dave"), timeout=120, interval=0.05,
                       what="Kueue to admit dave")
        server = await hubrest.server(http, "dave", tokens["dave"])
        assert await hubrest.stop(http, "dave", tokens["dave"]) in (202, 204)
        assert server["pending"] == "spawn" and not server["ready"], server
        await wait_for(lambda: _no_server(hubrest.server(http, "dave", tokens["dave"])),
                       timeout=120, what="the hub to finish stopping dave's server")
        await wait_for(lambda: _nothing_left(kube, "jhub-data-science", ["alice", "dave"]),
                       timeout=60, what="alice's and dave's pods and Workloads to go")
        pods = (await kube.core.list_namespaced_pod("jhub-data-science")).items
        assert [p.metadata.name for p in pods if p.spec.scheduling_gates] == []
        await wait_for(lambda: _cluster_queue_idle(kube, "data-science"), timeout=60,
                       what="data-science's quota to be free")
    finally:
        await asyncio.gather(*(hubrest.stop(http, u, t) for u, t in tokens.items()))
        await wait_for(lambda: _nothing_left(kube, "jhub-data-science", list(tokens)),
                       timeout=120, what="alice's and dave's pods and Workloads to go")


async def _pending_users(kube, user) -> bool:
    return user in (await _queue(kube, "jhub-data-science"))[1]


async def _admitted_users(kube, user) -> bool:
    return user in (await _queue(kube, "jhub-data-science"))[0]


async def _no_server(server) -> bool:
    return await server is None
