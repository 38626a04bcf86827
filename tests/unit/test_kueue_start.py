"""The queue-aware start (kueue/start.py) around a start coroutine, with the pod and
Workloads as the shared caches would hold them: each outcome is counted once, a
refused spawn is withdrawn, progress shows each stage."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import REGISTRY

from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.kueue.lifecycle import Outcome, SpawnRefused
from jupyterhub_gpu.kueue.messages import Position, Step
from jupyterhub_gpu.kueue.start import QueuedStart, progress

from .test_kueue_messages import NO_FIT_MSG, WAIT_MSG, pod, workload

PROFILE = "a100-mig-3g"


def spawns(outcome: Outcome, pool: str | None = None) -> float:
    """Spawns of PROFILE with ``outcome``, labelled with ``pool``: a100mig, the
    profile's only pool, once started; "none" otherwise (never admitted anywhere)."""
    if pool is None:
        pool = "a100mig" if outcome is Outcome.STARTED else "none"
    labels = {"profile": PROFILE, "outcome": outcome.value, "pool": pool}
    return REGISTRY.get_sample_value("jupyterhub_gpu_spawns_total", labels) or 0


def waits() -> float:
    labels = {"profile": PROFILE, "queue": "data-science", "pool": "a100mig"}
    return REGISTRY.get_sample_value("jupyterhub_gpu_queue_wait_seconds_count", labels) or 0


@pytest.fixture
def cache():
    """What the shared reflectors hold for the spawn: its pod and the Workloads."""
    return {"pod": None, "workloads": []}


@pytest.fixture
def queued(platform, cache):
    grant = authorize(platform, UserRef("ann", frozenset({"data-science"})),
                      {"profile": PROFILE})
    return QueuedStart(grant, "jhub-data-science", pod=lambda: cache["pod"],
                       workloads=lambda: cache["workloads"], events=list,
                       log=logging.getLogger("test"), who="ann")


async def until(check, timeout=30):
    """Wait (generously) for ``check()`` to hold."""
    async def poll():
        while not check():
            await asyncio.sleep(0.05)
    await asyncio.wait_for(poll(), timeout)


class Withdraw:
    def __init__(self):
        self.calls = 0

    async def __call__(self):
        self.calls += 1


async def test_a_start_counts_started_and_the_queue_wait(queued, cache):
    before, waits_before = spawns(Outcome.STARTED), waits()

    async def start():
        cache["pod"] = pod(gated=False, node="n1", phase="Running")
        return "http://10.0.0.5:8888"

    withdraw = Withdraw()
    assert await queued.run(start, withdraw) == "http://10.0.0.5:8888"
    assert queued.stage.key is Step.STARTED and withdraw.calls == 0
    assert spawns(Outcome.STARTED) == before + 1 and waits() == waits_before + 1


async def test_a_request_that_never_fits_is_withdrawn_and_counted(queued, cache):
    cache["pod"] = pod()
    cache["workloads"] = [workload("w", reserved=False, message=NO_FIT_MSG)]
    before, started_before = spawns(Outcome.NEVER_FITS), spawns(Outcome.STARTED)
    start_cancelled = asyncio.Event()

    async def start():
        try:
            await asyncio.Event().wait()  # KubeSpawner waits for the pod to run
        except asyncio.CancelledError:
            start_cancelled.set()
            raise

    withdraw = Withdraw()
    with pytest.raises(SpawnRefused, match="cannot start in queue data-science") as info:
        await queued.run(start, withdraw)
    assert info.value.outcome is Outcome.NEVER_FITS
    await asyncio.wait_for(start_cancelled.wait(), 10)
    assert withdraw.calls == 1
    assert spawns(Outcome.NEVER_FITS) == before + 1
    assert spawns(Outcome.STARTED) == started_before


async def test_a_cancelled_spawn_cancels_the_start_and_is_counted(queued):
    before = spawns(Outcome.CANCELLED)
    running, start_cancelled = asyncio.Event(), asyncio.Event()

    async def start():
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            start_cancelled.set()
            raise

    task = asyncio.ensure_future(queued.run(start, Withdraw()))
    await asyncio.wait_for(running.wait(), 10)
    task.cancel()  # what the hub does when the user stops a pending spawn
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(start_cancelled.wait(), 10)
    assert spawns(Outcome.CANCELLED) == before + 1


async def test_a_failed_start_is_counted_as_failed_without_a_queue_wait(queued):
    before, waits_before = spawns(Outcome.FAILED), waits()

    async def start():
        raise RuntimeError("the pod never became ready")

    with pytest.raises(RuntimeError, match="never became ready"):
        await queued.run(start, Withdraw())
    assert spawns(Outcome.FAILED) == before + 1 and waits() == waits_before


async def test_the_spawn_goes_on_when_the_watch_fails(platform, caplog):
    """The watch fails on every look: logged, and the server still starts."""
    grant = authorize(platform, UserRef("ann", frozenset({"data-science"})),
                      {"profile": PROFILE})

    def broken_cache():
        raise KeyError("metadata")

    queued = QueuedStart(grant, "jhub-data-science", pod=broken_cache, workloads=list,
                         events=list, log=logging.getLogger("test"), who="ann")
    before = spawns(Outcome.STARTED)
    started = asyncio.Event()

    async def start():
        await started.wait()
        return "http://10.0.0.5:8888"

    caplog.set_level(logging.ERROR, logger="test")
    task = asyncio.ensure_future(queued.run(start, Withdraw()))
    # until the watch has observed once, and failed
    await until(lambda: "Queue watch of ann failed (KeyError('metadata'))" in caplog.text)
    started.set()
    assert await asyncio.wait_for(task, 10) == "http://10.0.0.5:8888"
    assert spawns(Outcome.STARTED) == before + 1


async def test_progress_shows_each_stage_once_until_the_start_is_done(queued, cache):
    messages: list[str] = []
    done = asyncio.Event()

    async def follow():
        async for event in progress(lambda: queued, done.is_set):
            messages.append(event["message"])

    follower = asyncio.ensure_future(follow())

    async def start():
        cache["pod"] = pod()
        cache["workloads"] = [workload("w", reserved=False, message=WAIT_MSG)]
        await until(lambda: any("position" in m for m in messages))
        assert queued.stage.position == Position(1, 1)  # the position, as data
        cache["pod"] = pod(gated=False, node="n1", phase="Running")
        return "http://10.0.0.5:8888"

    await queued.run(start, Withdraw())
    done.set()
    await asyncio.wait_for(follower, 10)
    assert messages[0] == "Requesting an A100-80GB MIG 3g.40gb slice (A100 MIG 3g.40gb slice)"
    assert ("Waiting for an A100-80GB MIG 3g.40gb slice in queue data-science: "
            "position 1 of 1") in messages
    assert messages[-1] == "Your server is running; connecting"
    assert len(messages) == len(set(messages))


class Shown:
    """The spawn's pod as the shared pod reflector shows it to the watch, one state per
    read: the watch reads the pod once per observation, so each state is observed
    before the next is shown; the last one stays until :meth:`show` replaces it."""

    def __init__(self, *states: dict | None):
        self.states = list(states)

    def __call__(self) -> dict | None:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def show(self, pod: dict | None) -> None:
        self.states = [pod]


async def test_a_spawn_whose_own_pod_is_removed_before_it_runs_fails_at_once(platform):
    """Its node taken back, or preempted, as it starts: KubeSpawner would wait for the
    pod to run until the start timeout; the spawn fails at once, saying why. An earlier
    pod of the same name (another spawn's, as KubeSpawner replaces it) is not ours, and
    its going ends nothing: the watch observes the earlier pod, then no pod, then this
    spawn's own pod, each in turn."""
    grant = authorize(platform, UserRef("ann", frozenset({"data-science"})),
                      {"profile": PROFILE})
    shown = Shown(pod(uid="earlier"), None, pod(uid="mine", gated=False, node="node-1"))
    queued = QueuedStart(grant, "jhub-data-science", pod=shown, workloads=list,
                         events=list, log=logging.getLogger("test"), who="ann",
                         ours=lambda p: p["metadata"]["uid"] != "earlier")
    before = spawns(Outcome.FAILED)
    withdraw = Withdraw()
    run = asyncio.ensure_future(queued.run(asyncio.Event().wait, withdraw))
    await until(lambda: queued.watch.own_uid == "mine" or run.done())  # after the other two
    assert not run.done()
    shown.show(None)  # deleted before it ran
    with pytest.raises(SpawnRefused) as info:
        await asyncio.wait_for(run, 30)
    assert str(info.value).startswith(
        "Your server (A100 MIG 3g.40gb slice) was removed before it started: ")
    assert info.value.outcome is Outcome.FAILED and withdraw.calls == 1
    assert spawns(Outcome.FAILED) == before + 1
