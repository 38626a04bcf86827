"""Spawn progress and stop notices in plain words (pure functions)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Callable, NamedTuple, Sequence

from ..contract import DISRUPTION_TARGET, POOL_ANNOTATION
from ..spec.model import Platform
from . import status as st

# The event source (component) of Karpenter, AKS's node auto-provisioner as well.
KARPENTER = "karpenter"

#: while Kueue's manager does not answer: a queued (or submitted) spawn's progress
QUEUE_UNAVAILABLE = ("Queue {queue} is temporarily unavailable: Kueue, which runs it, is "
                     "not answering. Your request is kept and goes on once the queue is back")
#: while Kueue's manager does not answer: a new spawn, whose pod the API server refused
SUBMIT_UNAVAILABLE = ("Queue {queue} is temporarily unavailable: Kueue, which runs it, is "
                      "not answering, so your server could not be requested. Nothing was "
                      "created; try again in a few minutes.")


def queue_unavailable(queue: str) -> str:
    return QUEUE_UNAVAILABLE.format(queue=queue)


def submit_unavailable(queue: str) -> str:
    return SUBMIT_UNAVAILABLE.format(queue=queue)


#: what a :class:`Wanted` starts, as the messages name it
SERVER, KERNEL = "server", "GPU kernel"


@dataclass(frozen=True)
class Wanted:
    """What the user asked for, as the messages name it."""

    profile: str  # display name
    what: str  # e.g. "an A100-80GB MIG 3g.40gb slice"
    queue: str  # LocalQueue
    pool: str
    gpu: str
    image: str
    boot_seconds: int | None = None  # how long a new node of the pool usually takes
    thing: str = SERVER  # what is starting: a server, or a GPU kernel (KERNEL)


class Step(StrEnum):
    """Where a spawn is (:func:`describe`)."""

    CREATING = "creating"  # no pod yet
    SUBMITTING = "submitting"  # gated, no Workload yet
    QUEUED = "queued"  # waiting for quota
    QUEUE_DOWN = "queue-unavailable"  # Kueue does not answer: no position is known
    NEVER_FITS = "never-fits"  # Kueue says no quota can ever hold it
    ADMITTED = "admitted"
    SCHEDULING = "scheduling"
    SCALE_UP = "scale-up"
    NO_SCALE_UP = "no-scale-up"
    STARTING = "starting"  # on a node
    PULLING = "pulling"
    PULL_FAILED = "pull-failed"
    PULLED = "pulled"
    STARTED = "started"  # running


class Position(NamedTuple):
    """A Workload's place among the pending Workloads of its LocalQueue."""

    place: int  # 1-based; 0: not among them
    total: int

    def __str__(self) -> str:
        return f"position {self.place} of {self.total}"


@dataclass(frozen=True)
class Stage:
    key: Step
    message: str
    progress: int
    failure: str | None = None  # set: the spawn cannot succeed
    position: Position | None = None  # set while queued, when known


def indefinite(noun: str) -> str:
    """``noun`` with its indefinite article (GPU names start with a letter or digit)."""
    return ("an " if noun[:1] in "AEFHILMNORSX8" else "a ") + noun


def _latest_event(events: list[dict], *reasons: str) -> dict | None:
    matching = [e for e in events if e.get("reason") in reasons]
    return matching[-1] if matching else None


def _waiting(w: Wanted, workload: dict, position: Position | None) -> Stage:
    no_fit = st.never_fits(workload)
    if no_fit:
        failure = (f"The profile '{w.profile}' cannot start in queue {w.queue}: "
                   f"{no_fit.naming_the_unit(w.what)}. Choose another profile or ask your "
                   f"JupyterHub admin.")
        return Stage(Step.NEVER_FITS, failure, 100, failure)
    where = f"Waiting for {w.what} in queue {w.queue}"
    if position and position.place:
        return Stage(Step.QUEUED, f"{where}: {position}", 20, position=position)
    return Stage(Step.QUEUED, where, 20)


def _about(seconds: int | None) -> str:
    if seconds is None:
        return "a few minutes"
    if seconds < 90:
        return f"about {seconds} second{'s' if seconds != 1 else ''}"
    minutes = round(seconds / 60)
    return f"about {minutes} minute{'s' if minutes != 1 else ''}"


def _by_karpenter(event: dict) -> bool:
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent")
    return source == KARPENTER


def _karpenter(w: Wanted, event: dict) -> Stage | None:
    """Karpenter's pod events (AKS Node Auto Provisioning and the dev cluster)."""
    if event["reason"] == "Nominated":  # "Pod should schedule on: nodeclaim/..."
        return Stage("scale-up", f"Starting a new {w.gpu} machine for pool {w.pool}; this "
                     f"usually takes {_about(w.boot_seconds)}", 50)
    if f"limits have been exhausted for nodepool (NodePool={w.pool})" in event.get("message", ""):
        return Stage("no-scale-up", f"No {w.gpu} machine can be added to pool {w.pool} right "
                     "now: it is at its maximum size; still waiting for room", 50)
    return None


def _scheduling(w: Wanted, events: list[dict]) -> Stage:
    # Karpenter's word beats the scheduler's "no room" it keeps repeating meanwhile.
    from_karpenter = _latest_event([e for e in events if _by_karpenter(e)],
                                   "Nominated", "FailedScheduling")
    stage = _karpenter(w, from_karpenter) if from_karpenter else None
    if stage:
        return stage
    event = _latest_event(events, "TriggeredScaleUp", "NotTriggerScaleUp", "FailedScheduling")
    reason = (event or {}).get("reason")
    if reason == "TriggeredScaleUp":
        return Stage(Step.SCALE_UP, f"Adding {indefinite(w.gpu)} node to pool {w.pool} (node scale-up); "
                     "this usually takes a few minutes", 50)
    if reason == "NotTriggerScaleUp":
        return Stage(Step.NO_SCALE_UP, f"No {w.gpu} node can be added to pool {w.pool} right "
                     "now (it may be at its maximum size); still waiting", 50)
    if reason == "FailedScheduling":
        return Stage(Step.SCHEDULING, f"Waiting for room on {indefinite(w.gpu)} node of pool {w.pool}", 45)
    return Stage(Step.SCHEDULING, f"Finding {indefinite(w.gpu)} node in pool {w.pool}", 45)


def _on_node(w: Wanted, pod: dict, events: list[dict]) -> Stage:
    event = _latest_event(events, "Pulling", "Pulled", "Failed", "BackOff")
    reason = (event or {}).get("reason")
    if reason == "Pulling":
        return Stage(Step.PULLING, f"Downloading the image {w.image} (the first start on a new "
                     "node can take several minutes)", 70)
    if reason in ("Failed", "BackOff"):
        return Stage(Step.PULL_FAILED, f"Problem starting the image: {event.get('message', '')}",
                     70)
    if reason == "Pulled":
        return Stage(Step.PULLED, f"Image ready; starting your {w.thing}", 80)
    return Stage(Step.STARTING, f"Starting on node {pod['spec']['nodeName']}", 60)


def describe(w: Wanted, pod: dict | None, workload: dict | None,
             position: tuple[int, int] | None,
             events: Sequence[dict] | Callable[[], Sequence[dict]],
             queue_down: bool = False) -> Stage:
    """Where a spawn is, from the pod, its Workload, its queue position (place, total)
    and the pod's events (or what gives them: called only at the stages they tell,
    once the pod is past the queue); ``queue_down``: Kueue does not answer, so a spawn
    it has not admitted yet has no position worth showing."""
    if pod is None:
        return Stage(Step.CREATING, f"Requesting {w.what} ({w.profile})", 5)
    if pod.get("status", {}).get("phase") == "Running":
        return Stage(Step.STARTED, f"Your {w.thing} is running; connecting", 95)
    if st.is_gated(pod):
        if queue_down and not st.is_true(workload, "QuotaReserved"):
            return Stage(Step.QUEUE_DOWN, queue_unavailable(w.queue), 20)
        if workload is None:
            return Stage(Step.SUBMITTING, f"Submitting your request to queue {w.queue}", 10)
        if not st.is_true(workload, "QuotaReserved"):
            return _waiting(w, workload, position and Position(*position))
        return Stage(Step.ADMITTED, f"Admitted by queue {w.queue}; {w.what} is reserved for you",
                     40)
    events = list(events() if callable(events) else events)
    if not pod.get("spec", {}).get("nodeName"):
        return _scheduling(w, events)
    return _on_node(w, pod, events)


def pod_removed(w: Wanted) -> str:
    """A spawn's pod deleted before its server ran (its node taken back, preempted,
    or deleted by hand): said at once, not after the whole start timeout."""
    return (f"Your server ({w.profile}) was removed before it started: its node may "
            "have been taken back, or other work took its place. Your files are kept; "
            "start your server again.")


_PREEMPTION_WORDS = {
    "InClusterQueue": "to make room for higher-priority work in queue {queue}",
    "InCohortReclamation": "because another team took back GPUs your team had borrowed",
    "InCohortFairSharing": "to share borrowed GPUs fairly with another team",
    "InCohortReclaimWhileBorrowing": "to make room for another team's higher-priority "
                                     "work on GPUs your team had borrowed",
}
_DISRUPTION_WORDS = {
    "DeletionByTaintManager": "its node was taken away (spot eviction or node failure)",
    "EvictionByEvictionAPI": "its node was drained for maintenance or scale-down",
    "TerminationByKubelet": "its node shut down (spot eviction)",
    "DeletionByPodGC": "its node went away",
    "PreemptionByScheduler": "the scheduler made room for higher-priority work",
}
#: the node-going disruptions on a spot pool: Azure took the spot VM back (on AKS, node
#: auto-drain turns its Preempt event into evictions through the Eviction API)
_SPOT_WORDS = "its spot VM was taken back by Azure (a spot eviction)"
_NODE_GOING = frozenset({"DeletionByTaintManager", "EvictionByEvictionAPI",
                         "TerminationByKubelet", "DeletionByPodGC"})


@dataclass(frozen=True)
class Preemptor:
    """The training job whose admission preempted a server."""

    job: str
    team: str


#: the reasons of a :class:`StopNotice` (the ``reason`` label of
#: ``jupyterhub_gpu_preemptions_total``): Kueue preempted it, or it was evicted (its node
#: went away or was drained, or Kueue evicted it for another cause)
PREEMPTED, EVICTED = "preempted", "evicted"
STOP_REASONS = (PREEMPTED, EVICTED)


@dataclass(frozen=True)
class StopNotice:
    """Why a running server was stopped by the platform, for the user's next page."""

    reason: str  # one of STOP_REASONS
    at: str  # ISO time
    message: str
    pool: str = ""  # the pool the server ran on ("" if unknown)


def preempting_job(workload: dict | None, candidates: list[dict],
                   platform: Platform) -> Preemptor | None:
    """The training job (a batch Job's Workload among ``candidates``) that Kueue
    preempted ``workload`` for, with its team; None for anything else."""
    found = st.preemptor(workload, candidates)
    job = st.owner_job(found) if found else None
    if job is None:
        return None
    namespace = found["metadata"].get("namespace", "")
    team = next((t.name for t in platform.teams if t.namespace == namespace), namespace)
    return Preemptor(job, team)


def _preemption(pod: dict, workload: dict | None, queue: str,
                by: Preemptor | None) -> tuple[str, str] | None:
    target = st.condition(pod, "TerminationTarget")
    if not target:
        return None
    if by is not None:
        return PREEMPTED, f"preempted for training job {by.job} of team {by.team}"
    preempted = st.condition(workload, "Preempted") or {}
    words = _PREEMPTION_WORDS.get(preempted.get("reason", ""))
    if words:
        return PREEMPTED, f"preempted {words.format(queue=queue)}"
    kueue_reason = target.get("reason", "").removeprefix("WorkloadEvictedDueTo")
    if kueue_reason == "Preempted":
        return PREEMPTED, f"preempted to make room for higher-priority work in queue {queue}"
    return EVICTED, f"stopped by the queue ({kueue_reason or 'evicted'})"


#: a server whose node stopped answering (:func:`node_lost_notice`)
NODE_LOST = ("Your server was stopped because its node {node} stopped responding "
             "(not ready since {since:%H:%M} UTC on {since:%Y-%m-%d}).")


def node_lost_notice(node: str, since: datetime, at: datetime, checkpoint_dir: str | None,
                     pool: str = "") -> StopNotice:
    """The notice of a server the hub stopped because its node went NotReady."""
    kept = "Your files are kept; start your server again to get another node"
    if checkpoint_dir:
        kept += f"; your checkpoints are in {checkpoint_dir}"
    message = f"{NODE_LOST.format(node=node, since=since)} {kept}."
    return StopNotice(EVICTED, at.isoformat(), message, pool)


def _disruption(pod: dict, pool: str, spot_pools: frozenset[str]) -> tuple[str, str] | None:
    disruption = st.condition(pod, DISRUPTION_TARGET)
    if not disruption:
        return None
    cause = disruption.get("reason", "")
    if pool in spot_pools and cause in _NODE_GOING:
        return EVICTED, f"stopped because {_SPOT_WORDS}"
    return EVICTED, f"stopped because {_DISRUPTION_WORDS.get(cause, 'its node went away')}"


def platform_stop(pod: dict, workload: dict | None, queue: str, by: Preemptor | None = None,
                  spot_pools: frozenset[str] = frozenset()) -> tuple[str, str] | None:
    """(reason, words) when the last seen state of ``pod`` shows that the platform
    stopped it (Kueue preempted or evicted it, its node went away), e.g. ``("preempted",
    "preempted to make room for higher-priority work in queue ml-eng")``; None for a
    normal stop. The words of a server's :func:`stop_notice` and of a GPU kernel's."""
    return (_preemption(pod, workload, queue, by)
            or _disruption(pod, _pool(pod, workload), spot_pools))


def _recorded_pool(pod: dict) -> str | None:
    """A fallback profile's pod: the pool the hub recorded on it (worth saying)."""
    return (pod["metadata"].get("annotations") or {}).get(POOL_ANNOTATION)


def _pool(pod: dict, workload: dict | None) -> str:
    """The pool a pod ran on, as far as it, its Workload or its placement say."""
    return _recorded_pool(pod) or st.admitted_pool(workload) or st.selected_pool(pod) or ""


def stop_notice(pod: dict, workload: dict | None, queue: str, at: datetime,
                checkpoint_dir: str | None, by: Preemptor | None = None,
                spot_pools: frozenset[str] = frozenset()) -> StopNotice | None:
    """A notice when the last seen state of a vanished pod shows the platform stopped
    it (Kueue preemption or eviction, a node going away); None for a normal stop.
    ``by``: the training job Kueue preempted it for, when it was one; ``spot_pools``:
    the spec's spot pools (a node going away there is a spot eviction)."""
    recorded, pool = _recorded_pool(pod), _pool(pod, workload)
    found = platform_stop(pod, workload, queue, by, spot_pools)
    if found is None:
        return None
    reason, words = found
    ran = f" It ran on pool {pool}." if recorded else ""
    kept = "Your files are kept"
    if checkpoint_dir:
        kept += f"; your checkpoints are in {checkpoint_dir}"
    message = f"Your server was {words} at {at:%H:%M} UTC on {at:%Y-%m-%d}.{ran} {kept}."
    return StopNotice(reason, at.isoformat(), message, pool)
