"""What the cluster says about a session, a job or a GPU kernel, as a
:class:`~.ledger.Usage` (pure functions of the objects as the API returns them)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Iterable

from ..spec.grant import Grant
from ..contract import (JOB_PROFILE_LABEL, POOL_ANNOTATION, PROFILE_LABEL, QUEUE_LABEL,
                        SERVERNAME_KEY, USERNAME_KEY)
from ..kueue import status as st
from ..kueue.messages import EVICTED, PREEMPTED, stop_notice
from ..spec.model import Platform, Pool, Team
from ..ledger.store import PODLESS_PREFIX, Kind, StopReason, Usage

#: a stop notice's reason (:class:`~jupyterhub_gpu.kueue.messages.StopNotice`) in the ledger
NOTICE_REASONS = {PREEMPTED: StopReason.PREEMPTED, EVICTED: StopReason.EVICTED}


def parse_time(value: str | datetime | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def _condition_time(obj: dict | None, kind: str) -> datetime | None:
    found = st.condition(obj, kind)
    if found is None or found.get("status") != "True":
        return None
    return parse_time(found.get("lastTransitionTime"))


def running_since(pods: Iterable[dict]) -> datetime | None:
    """When the first container of ``pods`` started running."""
    times = []
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            state = status.get("state") or {}
            started = (state.get("running") or state.get("terminated") or {}).get("startedAt")
            if started:
                times.append(parse_time(started))
    return min(times) if times else None


def _pool_of(pools: Iterable[Pool], name: str | None) -> Pool | None:
    return next((p for p in pools if p.name == name), None)


def _admission(pools: tuple[Pool, ...], workload: dict | None, pod: dict | None) -> dict:
    """The admitted pool and its price per unit-hour; a single-pool request that
    runs is on its pool even if the Workload is gone."""
    name = st.admitted_pool(workload)
    if name is None and pod is not None:
        name = (pod["metadata"].get("annotations") or {}).get(POOL_ANNOTATION)
    if name is None and len(pools) == 1 and pod is not None and running_since([pod]):
        name = pools[0].name
    pool = _pool_of(pools, name)
    return {"pool": name, "admitted_at": _condition_time(workload, "QuotaReserved"),
            "price_per_unit_hour": pool.price_per_unit_hour if pool else None}


def _team(platform: Platform, namespace: str | None, queue: str | None) -> Team | None:
    return next((t for t in platform.teams if t.namespace == namespace
                 and (queue is None or t.local_queue == queue)), None)


def _of_pod(platform: Platform, pod: dict, workload: dict | None, **facts) -> Usage:
    """What a server's or a GPU kernel's pod says, by its labels and the spec
    ``platform``; ``facts``: its key, kind, server and what else only the caller knows."""
    meta = pod["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    slug = labels.get(PROFILE_LABEL)
    profile = platform.profile(slug) if slug else None
    team = _team(platform, meta.get("namespace"), labels.get(QUEUE_LABEL))
    pools = platform.pools_of(profile) if profile else ()
    return Usage(
        user=annotations.get(USERNAME_KEY), team=team.name if team else None,
        namespace=meta.get("namespace"), profile=slug,
        pools=",".join(p.name for p in pools) or None,
        gpu_units=profile.units if profile else None,
        requested_at=parse_time(meta.get("creationTimestamp")),
        running_at=running_since([pod]), **_admission(pools, workload, pod), **facts)


def session(platform: Platform, pod: dict, workload: dict | None, server: str = "") -> Usage:
    """The session of server ``server`` whose pod is ``pod``, by its labels and the
    spec ``platform`` (the spec it was granted by, or after a hub restart today's)."""
    meta = pod["metadata"]
    return _of_pod(platform, pod, workload, key=f"pod:{meta['uid']}", kind=Kind.SESSION,
                   server=(meta.get("annotations") or {}).get(SERVERNAME_KEY, server))


def podless_session(grant: Grant, namespace: str, user: str, server: str,
                    requested_at: datetime, stopped_at: datetime,
                    reason: StopReason) -> Usage:
    """A start the hub accepted that failed before its pod existed (nothing created:
    nothing queued or billed), by its grant, under a key of its own."""
    return Usage(
        key=f"{PODLESS_PREFIX}{uuid.uuid4().hex}", kind=Kind.SESSION, user=user,
        server=server, team=grant.team.name, namespace=namespace,
        profile=grant.profile.slug, pools=",".join(p.name for p in grant.pools),
        gpu_units=grant.profile.units, requested_at=requested_at,
        stopped_at=stopped_at, stop_reason=reason)


def stop_reason_of_notice(reason: str, pool: Pool | None) -> StopReason:
    """A platform stop's ledger reason: an eviction from a spot pool is a spot eviction."""
    found = NOTICE_REASONS.get(reason, StopReason.EVICTED)
    if found is StopReason.EVICTED and pool is not None and pool.spot:
        return StopReason.SPOT_EVICTION
    return found


def _job_end(job: dict) -> tuple[datetime | None, StopReason | None]:
    for kind, reason in (("Complete", StopReason.COMPLETED), ("Failed", StopReason.FAILURE)):
        at = _condition_time(job, kind)
        if at is not None:
            return at, reason
    deleted = parse_time(job["metadata"].get("deletionTimestamp"))
    return (deleted, StopReason.USER) if deleted else (None, None)


def job_running_since(job: dict, pods: list[dict], stopped_at: datetime | None
                      ) -> datetime | None:
    """When the job's first container started; a job that ended with its pods already
    gone (it finished while no one watched): when the Job controller started it (its
    ``status.startTime``, which Kubernetes clears while a Job is suspended in the
    queue), so its GPU-hours are not lost."""
    started = running_since(pods)
    if started is None and stopped_at is not None:
        started = parse_time((job.get("status") or {}).get("startTime"))
    return started


def job(platform: Platform, job: dict, workload: dict | None, pods: list[dict]) -> Usage:
    """A training job, from its Job, Workload and pods."""
    meta = job["metadata"]
    team = _team(platform, meta.get("namespace"), None)
    slug = (meta.get("labels") or {}).get(JOB_PROFILE_LABEL)
    profile = next((p for p in platform.job_profiles if p.slug == slug), None)
    pools = platform.pools_of(profile) if profile else ()
    stopped_at, reason = _job_end(job)
    return Usage(
        key=f"job:{meta['uid']}", kind=Kind.JOB,
        user=(meta.get("annotations") or {}).get(USERNAME_KEY), server=meta.get("name"),
        team=team.name if team else None, namespace=meta.get("namespace"), profile=slug,
        pools=",".join(p.name for p in pools) or None,
        gpu_units=profile.units * profile.pods if profile else None,
        requested_at=parse_time(meta.get("creationTimestamp")),
        running_at=job_running_since(job, pods, stopped_at), stopped_at=stopped_at,
        stop_reason=reason, **_admission(pools, workload, None))


#: a GPU kernel's key in the ledger: this and its pod's uid
KERNEL_KEY = "kernel:"


def finished_at(pod: dict) -> datetime | None:
    """When the last container of ``pod`` that ended did (None: none has)."""
    times = [parse_time(finished) for status in (pod.get("status") or {}).get(
                 "containerStatuses") or []
             if (finished := ((status.get("state") or {}).get("terminated") or {}).get(
                 "finishedAt"))]
    return max(times) if times else None


def _kernel_end(platform: Platform, pod: dict, workload: dict | None
                ) -> tuple[datetime | None, StopReason | None]:
    """When and why a GPU kernel's pod stopped, as far as the pod says: the platform
    stopped it (as a server's stop notice tells it), it is being deleted (by its user),
    or it failed; when: the deletion's request (its deadline less its grace period), or
    its kernel's end if earlier. A kernel that exited (a shutdown) and is not deleted
    yet has none: the deletion that follows says why."""
    meta, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
    deleting = parse_time(meta.get("deletionTimestamp"))
    if deleting is not None:
        deleting -= timedelta(seconds=meta.get("deletionGracePeriodSeconds") or 0)
    known = [t for t in (deleting, finished_at(pod)) if t is not None]
    if not known:
        return None, None
    at = min(known)
    spot = frozenset(p.name for p in platform.pools if p.spot)
    notice = stop_notice(pod, workload, "", at, None, spot_pools=spot)
    if notice is not None:
        return at, stop_reason_of_notice(notice.reason, _pool_of(platform.pools, notice.pool))
    if deleting is not None:
        return at, StopReason.USER
    return (at, StopReason.FAILURE) if phase == "Failed" else (None, None)


def kernel(platform: Platform, pod: dict, workload: dict | None) -> Usage:
    """A GPU kernel, from its pod (the service's: named, annotated with its user's
    name and labelled as a server's pod of its profile) and its Workload."""
    meta = pod["metadata"]
    stopped_at, reason = _kernel_end(platform, pod, workload)
    return _of_pod(platform, pod, workload, key=f"{KERNEL_KEY}{meta['uid']}",
                   kind=Kind.KERNEL, server=meta.get("name"), stopped_at=stopped_at,
                   stop_reason=reason)
