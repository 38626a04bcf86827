"""Where a GPU kernel's pod is, in the spawn page's words (pure): what the
``gpu-kernels`` service adds to a kernel it answers (:func:`jupyterhub_gpu.kernels.
service.view`), and the provisioner passes on to the notebook's GPU status item
(:mod:`jupyterhub_gpu.kernels.states`).

* ``stage``, while the pod starts: :func:`jupyterhub_gpu.kueue.messages.describe`, the
  function of a queued server's progress, on the same facts (the pod, its Workload,
  its place among the pending Workloads of the team's queue, the pod's events), naming
  a GPU kernel where it names a server: e.g. ``{"step": "queued", "message": "Waiting
  for a T4 time-sliced share in queue ml-eng: position 2 of 3", "position": [2, 3]}``,
  or ``{"step": "scale-up", "message": "Starting a new T4 machine for pool t4; this
  usually takes about 2 minutes", ...}``;
* ``stopped``, once the platform is taking the pod back:
  :func:`jupyterhub_gpu.kueue.messages.platform_stop`, the words of a server's stop
  notice (Kueue's preemption, which sets the pod's ``TerminationTarget`` condition then
  deletes it; an eviction; the node going away), e.g. ``{"reason": "preempted",
  "words": "preempted to make room for higher-priority work in queue ml-eng"}``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from ..contract import PROFILE_LABEL, QUEUE_LABEL
from ..kueue import status as st
from ..kueue.lifecycle import on_each_pool, wanted
from ..kueue.messages import KERNEL, Preemptor, Wanted, describe, platform_stop, preempting_job
from ..spec.grant import Grant
from ..spec.model import Platform
from .cluster import ENDED

def kernel_wanted(platform: Platform, pod: dict, pool: str | None) -> Wanted | None:
    """What the messages call a kernel pod's request (on ``pool`` once Kueue chose
    one of a fallback profile's); None if the spec no longer has its profile or team."""
    meta = pod["metadata"]
    profile = platform.profile((meta.get("labels") or {}).get(PROFILE_LABEL, ""))
    team = next((t for t in platform.teams if t.namespace == meta.get("namespace")), None)
    if profile is None or team is None:
        return None
    grant = Grant.of(platform, profile, team)
    return replace(on_each_pool(grant).get(pool or "", wanted(grant)), thing=KERNEL)


def stage(platform: Platform, pod: dict, workload: dict | None, workloads: Iterable[dict],
          events: list[dict]) -> dict | None:
    """Where the kernel's pod is in its start (see the module's docstring; a running
    pod's kernel is connecting); None once it has ended or is being deleted, or when
    its profile is gone."""
    if (pod["metadata"].get("deletionTimestamp")
            or (pod.get("status") or {}).get("phase") in ENDED):
        return None
    w = kernel_wanted(platform, pod, st.admitted_pool(workload))
    if w is None:
        return None
    position = (st.queue_position(workload, workloads)  # only a waiting one has a place
                if workload is not None and not st.is_true(workload, "QuotaReserved")
                else None)
    found = describe(w, pod, workload, position, events)
    return {"step": str(found.key), "message": found.message,
            "position": list(found.position) if found.position else None}


def stopped(platform: Platform, pod: dict, workload: dict | None,
            candidates: list[dict]) -> dict | None:
    """How the platform is taking the kernel's pod back (see the module's docstring),
    with the training job it was preempted for when ``candidates`` (the Workloads of
    its team's cohort) hold it; None for a pod nobody but its user stops."""
    spot = frozenset(p.name for p in platform.pools if p.spot)
    by: Preemptor | None = (preempting_job(workload, candidates, platform)
                            if candidates and workload is not None else None)
    queue = (pod["metadata"].get("labels") or {}).get(QUEUE_LABEL) or "its queue"
    found = platform_stop(pod, workload, queue, by, spot)
    return {"reason": found[0], "words": found[1]} if found else None
