"""A training job's status in words, from its Job, pods and Workload (pure).

``job list`` and ``job status`` print these, e.g. ``queued in ml-eng: position 2 of 3``,
``running on pool a100spot``, ``evicted (spot), restarting from the checkpoint``,
``preempted by a higher-priority workload, restarting``, ``succeeded after 2 h 14 min``,
``failed: the job ran longer than its maximum run time``. The objects are dicts as the
Kubernetes API returns them (the service's watches hold them so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping

from ..contract import DISRUPTION_TARGET, JOB_PROFILE_LABEL
from ..kueue import status as st
from ..spec.model import Platform

#: Kueue's message on a preempted Workload names the Workload that needed the room
_PREEMPTOR = re.compile(r"Preempted to accommodate a workload \(UID: (?P<uid>[^,)]+)")
#: who took the room, in Kueue's words (its message says why it preempted), when it
#: was not the caller's own
_PREEMPTED_FOR = {
    "due to reclamation within the cohort": "a workload of the team whose quota it borrowed",
    "due to prioritization": "a higher-priority workload",
}
#: a Job's failure reasons (its ``Failed`` condition) in words
_JOB_FAILURES = {
    "DeadlineExceeded": "the job ran longer than its maximum run time",
    "BackoffLimitExceeded": "it crashed more often than its profile's retries allow",
    "PodFailurePolicy": "its command could not run (not found or not executable)",
}


@dataclass(frozen=True)
class JobStatus:
    state: str  # one word: queued, admitted, running, evicted, preempted, succeeded, ...
    words: str


def duration(seconds: float) -> str:
    """``2 h 14 min``, ``14 min``, ``45 s``."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _pod_failure(pods: list[dict]) -> str:
    """The last terminated container's message or reason and exit code."""
    for pod in reversed(pods):
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = ((cs.get("state") or {}).get("terminated")
                     or (cs.get("lastState") or {}).get("terminated"))
            if ended and ended.get("exitCode"):
                said = (ended.get("message") or "").strip()
                return said or f"{ended.get('reason') or 'Error'}, exit code {ended['exitCode']}"
    return ""


def _failed(job: dict, pods: list[dict]) -> JobStatus:
    failed = st.condition(job, "Failed") or {}
    reason = _JOB_FAILURES.get(failed.get("reason", "")) or failed.get("message") or "failed"
    detail = _pod_failure(pods)
    return JobStatus("failed", f"failed: {reason}" + (f" ({detail})" if detail else ""))


def _finished(job: dict, pods: list[dict]) -> JobStatus | None:
    if st.is_true(job, "Complete"):
        status = job.get("status") or {}
        start, end = _time(status.get("startTime")), _time(status.get("completionTime"))
        took = f" after {duration((end - start).total_seconds())}" if start and end else ""
        return JobStatus("succeeded", f"succeeded{took}")
    if st.is_true(job, "Failed"):
        return _failed(job, pods)
    return None


def preemptor(workload: dict | None, workloads: Iterable[dict],
              yours: Mapping[str, str]) -> str | None:
    """Who took the room of a preempted ``workload``, in words that name nothing of
    another user's: the caller's own job or notebook by name when it was one of theirs
    (``yours``: the words for each of the caller's Jobs and notebook pods, by uid, e.g.
    ``your job job-bob-1a2b3c``), else what Kueue says of the preemptor's kind only (a
    higher-priority workload, a workload of the team whose quota this one borrowed);
    None when Kueue does not say."""
    message = (st.condition(workload, "Preempted") or {}).get("message", "")
    found = _PREEMPTOR.search(message)
    if not found:
        return None
    other = next((w for w in workloads if w["metadata"].get("uid") == found["uid"]), None)
    for ref in ((other or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("uid") in yours:
            return yours[ref["uid"]]
    return next((words for why, words in _PREEMPTED_FOR.items() if why in message),
                "another workload")


def _waiting(workload: dict | None, queue: str, position: tuple[int, int] | None,
             taken_by: str | None) -> JobStatus:
    if workload is None:
        return JobStatus("submitted", f"submitted to queue {queue}")
    no_fit = st.never_fits(workload)
    if no_fit:
        return JobStatus("never-fits", f"cannot start in queue {queue}: {no_fit.message}")
    where = f"queued in {queue}" + (f": position {position[0]} of {position[1]}"
                                    if position and position[0] else "")
    if st.is_true(workload, "Preempted") or st.is_true(workload, "Evicted"):
        by = f"preempted by {taken_by}" if taken_by else "preempted"
        if not st.is_true(workload, "Preempted"):
            reason = (st.condition(workload, "Evicted") or {}).get("reason", "evicted")
            by = f"evicted by the queue ({reason})"
        return JobStatus("preempted", f"{by}, restarting ({where})")
    return JobStatus("queued", where)


def _evicted(pods: list[dict], platform: Platform, pool: str | None,
             checkpoint: bool) -> JobStatus | None:
    if not any(st.condition(p, DISRUPTION_TARGET) for p in pods):
        return None
    spot = any(p.name == pool and p.spot for p in platform.pools)
    why = "spot" if spot else "its node went away"
    again = "restarting from the checkpoint" if checkpoint else "restarting"
    return JobStatus("evicted", f"evicted ({why}), {again}")


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase", "")


def describe(platform: Platform, job: dict, pods: list[dict], workload: dict | None,
             position: tuple[int, int] | None = None, taken_by: str | None = None) -> JobStatus:
    """The status of ``job`` (its pods oldest first, its Workload, its place in the
    queue while pending, and who preempted it, :func:`preemptor`)."""
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return JobStatus("cancelling", "cancelling")
    finished = _finished(job, pods)
    if finished:
        return finished
    queue = (workload or {}).get("spec", {}).get("queueName") or "its queue"
    if not st.is_true(workload, "QuotaReserved"):
        return _waiting(workload, queue, position, taken_by)
    live = [p for p in pods if _phase(p) in ("Pending", "Running")
            and not (p.get("metadata") or {}).get("deletionTimestamp")]
    running = [p for p in live if _phase(p) == "Running"]
    pool = st.admitted_pool(workload)
    slug = ((job.get("metadata") or {}).get("labels") or {}).get(JOB_PROFILE_LABEL, "")
    profile = platform.job_profile(slug)
    wanted = profile.pods if profile else len(running)
    if running:
        count = f" ({len(running)} of {wanted} pods)" if len(running) < wanted else ""
        return JobStatus("running", f"running on pool {pool or st.selected_pool(running[0])}"
                                    f"{count}")
    evicted = _evicted(pods, platform, pool, bool(profile and profile.checkpoint.enabled))
    if evicted:
        return evicted
    if not live and any(_phase(p) == "Succeeded" for p in pods):
        return JobStatus("finishing", "finishing")  # the Job controller has yet to say
    crashed = _pod_failure([p for p in pods if _phase(p) == "Failed"])
    if not live and crashed:
        return JobStatus("retrying", f"crashed ({crashed}), retrying")
    return JobStatus("admitted", f"admitted to pool {pool}, starting" if pool else "admitted")
