"""Pure interpretation of Workloads, pods and events (dicts as the API returns them)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..checkpoint import UNAVAILABLE
from ..contract import (ADMISSION_GATE, AGENTPOOL_LABEL, ENV_API_TOKEN, JOB_UID_LABEL,
                        KUEUE_POD_WEBHOOKS, NODEPOOL_LABEL, NVIDIA_PREFIX, PRIORITY_LABEL, PROFILE_LABEL,
                        QUEUE_LABEL, USERNAME_KEY)

_NO_FIT_CAPACITY = re.compile(
    r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>[^,]+), .*?"
    r"current podset request \((?P<request>[^)]*)\) > maximum capacity \((?P<max>[^)]*)\)")
_QUEUE_PROBLEM = re.compile(r"(LocalQueue|ClusterQueue) (\S+) (doesn't exist|is inactive)")
# Kueue 0.17's Preempted condition (pkg/scheduler/preemption, preemptionMessage)
_PREEMPTOR = re.compile(r"to accommodate a workload \(UID: (?P<uid>[^,]+), "
                        r"JobUID: (?P<job_uid>[^)]+)\)")


def condition(obj: dict | None, kind: str) -> dict | None:
    """The status condition of type ``kind``, or None."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def is_true(obj: dict | None, kind: str) -> bool:
    return (condition(obj, kind) or {}).get("status") == "True"


def kueue_not_answering(status: int | None, body: str | bytes | None) -> bool:
    """An API server's answer to a pod create (or its dry run) saying that Kueue's pod
    webhooks could not be called: its manager is down, and with upstream's
    ``failurePolicy: Fail`` no pod of a managed namespace is admitted meanwhile."""
    if status != 500 or not body:
        return False
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    return "failed calling webhook" in text and any(name in text for name in KUEUE_POD_WEBHOOKS)


def is_gated(pod: dict) -> bool:
    gates = pod.get("spec", {}).get("schedulingGates") or []
    return any(g.get("name") == ADMISSION_GATE for g in gates)


def admitted_pool(workload: dict | None) -> str | None:
    """The pool (ResourceFlavor) Kueue admitted ``workload`` to, or None before. A
    pod's requests are one resource group, so every resource has the same flavor."""
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        flavors = assignment.get("flavors") or {}
        if flavors:
            return next(iter(flavors.values()))
    return None


def selected_pool(pod: dict) -> str | None:
    """The pool a pod's nodeSelector names: a single-pool profile's from the start, a
    fallback profile's once Kueue has merged the admitted flavor's ``nodeLabels``."""
    selector = pod.get("spec", {}).get("nodeSelector") or {}
    return selector.get(AGENTPOOL_LABEL) or selector.get(NODEPOOL_LABEL)


def workload_for(pod: dict, workloads: Iterable[dict]) -> dict | None:
    """The Workload Kueue made for ``pod`` (matched by the job-uid label)."""
    uid = pod["metadata"].get("uid")
    return next((w for w in workloads
                 if (w["metadata"].get("labels") or {}).get(JOB_UID_LABEL) == uid), None)


def preemptor_ids(workload: dict | None) -> tuple[str, str] | None:
    """(uid, job uid) of the Workload that preempted ``workload``, as Kueue names them
    in its ``Preempted`` condition; None if it was not preempted so."""
    found = _PREEMPTOR.search((condition(workload, "Preempted") or {}).get("message", ""))
    return (found["uid"], found["job_uid"]) if found else None


def preemptor(workload: dict | None, candidates: Iterable[dict]) -> dict | None:
    """The Workload that preempted ``workload``, among ``candidates``
    (:func:`preemptor_ids`)."""
    ids = preemptor_ids(workload)
    if ids is None:
        return None
    uid, job_uid = ids
    return next((w for w in candidates if w["metadata"].get("uid") == uid
                 or (w["metadata"].get("labels") or {}).get(JOB_UID_LABEL) == job_uid), None)


def owner_job(workload: dict) -> str | None:
    """The name of the batch Job a Workload was made for, or None (a notebook's pod)."""
    return next((o["name"] for o in workload["metadata"].get("ownerReferences") or []
                 if o.get("kind") == "Job" and o.get("apiVersion", "").startswith("batch/")),
                None)


@dataclass(frozen=True)
class NoFit:
    """Why a workload can never be admitted, however long it waits. ``one_gpu``: the
    message's words after "it asks for" when Kueue named one GPU unit (every GPU pool
    counts its unit, a whole GPU, a share or a MIG slice, as ``nvidia.com/gpu``)."""

    message: str
    one_gpu: str | None = None

    def naming_the_unit(self, unit: str) -> str:
        """The message with one GPU unit in the user's words (``unit``: "an A100-80GB
        MIG 3g.40gb slice"), not as the resource Kueue counts."""
        if self.one_gpu is None:
            return self.message
        return f"it asks for {unit} {self.one_gpu}"


def never_fits(workload: dict) -> NoFit | None:
    """Kueue's verdict when no flavor could ever fit the request (the quota, even with
    all borrowing, is too small) or the queue is missing or stopped."""
    reserved = condition(workload, "QuotaReserved") or {}
    message = reserved.get("message", "")
    if reserved.get("status") != "False":
        return None
    queue = _QUEUE_PROBLEM.search(message)
    if queue:
        kind, name, what = queue.groups()
        what = "does not exist" if what == "doesn't exist" else what
        return NoFit(f"the {kind} '{name}' {what}")
    if "couldn't assign flavors" not in message or "insufficient unused quota" in message:
        return None  # waiting (or preempting) can help
    capacity = [m.groupdict() for m in _NO_FIT_CAPACITY.finditer(message)]
    if not capacity:
        return NoFit("no pool can ever hold this request")
    gpu = [c for c in capacity if c["resource"].startswith(NVIDIA_PREFIX)]
    worst = (gpu or capacity)[0]  # the GPU is what the user chose; name it first
    where = (f"on pool {worst['flavor']} but the most the queue can ever have there is "
             f"{worst['max']}")
    return NoFit(f"it asks for {worst['request']} {worst['resource']} {where}",
                 where if gpu and worst["request"] == "1" else None)


def _created(obj: dict) -> str:
    return obj["metadata"].get("creationTimestamp") or ""


def pending_order(workloads: Iterable[dict]) -> list[dict]:
    """The pending ones of ``workloads`` (of one queue) in Kueue's BestEffortFIFO order:
    higher priority first, then older first, then (created in the same second, as when
    many users click Start at once) by UID, as Kueue breaks the tie
    (``baseCompareFunc`` in Kueue's ``pkg/cache/queue/cluster_queue.go``)."""
    pending = [w for w in workloads
               if not is_true(w, "QuotaReserved") and not is_true(w, "Finished")]
    pending.sort(key=lambda w: (-(w.get("spec", {}).get("priority") or 0), _created(w),
                                w["metadata"].get("uid") or "", w["metadata"]["name"]))
    return pending


def queue_position(workload: dict, workloads: Iterable[dict]) -> tuple[int, int]:
    """(position, total) of ``workload`` among the pending workloads of its queue
    (:func:`pending_order`); position 0: not among them."""
    queue = workload.get("spec", {}).get("queueName")
    names = [w["metadata"]["name"] for w in pending_order(
        w for w in workloads if w.get("spec", {}).get("queueName") == queue)]
    name = workload["metadata"]["name"]
    return (names.index(name) + 1 if name in names else 0), len(names)


ADOPT_LABELS = (PROFILE_LABEL, QUEUE_LABEL, PRIORITY_LABEL, USERNAME_KEY)


def api_token(pod: dict) -> str | None:
    """The JupyterHub API token in the pod's environment: a new one for each spawn,
    so it tells this spawn's pod from an earlier one of the same name."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    env = containers[0].get("env") or []
    return next((e.get("value") for e in env if e.get("name") == ENV_API_TOKEN), None)


def adoptable_token(existing: dict, wanted_labels: dict[str, str]) -> str | None:
    """The API token of an existing pod a new spawn can take over, or None.

    A pod left by a hub that died while it was queued (or starting) keeps its
    Workload's place in the queue if the new spawn, for the same user, profile,
    queue and priority, adopts it instead of replacing it.
    """
    meta = existing.get("metadata", {})
    labels = meta.get("labels") or {}
    if meta.get("deletionTimestamp") or existing.get("status", {}).get("phase") not in (
            "Pending", "Running"):
        return None
    if any(labels.get(k) != wanted_labels.get(k) for k in ADOPT_LABELS):
        return None
    return api_token(existing) or None


def checkpoint_unavailable(pod: dict) -> tuple[str, str] | None:
    """(image, message) when a container's termination message says the preStop
    hook could not checkpoint (:func:`jupyterhub_gpu.checkpoint.prestop_command`)."""
    containers = pod.get("spec", {}).get("containers") or []
    images = {c.get("name"): c.get("image", "") for c in containers}
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        for state in (cs.get("state"), cs.get("lastState")):
            message = ((state or {}).get("terminated") or {}).get("message") or ""
            if UNAVAILABLE in message:
                return images.get(cs.get("name")) or cs.get("image", ""), message.strip()
    return None
