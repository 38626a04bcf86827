"""What a shared watch keeps of each object it stores: only the fields its readers
read (:func:`pruned`), so that a watch of thousands of objects holds their facts,
not their bulk.

Kueue's Workloads are the case: KubeSpawner watches no Workload, and each one
carries its pod's whole template (``spec.podSets``), its ``managedFields`` and its
resource usage, none of which the hub or its services read. :data:`WORKLOAD_FIELDS`
is the one list of what they read; the Workload watch
(:class:`~jupyterhub_gpu.watches.reflectors.WorkloadReflector`) stores, and so buries
in its graveyard, only that. A new reader of another field of a Workload adds it here.
Pods are stored whole, as KubeSpawner's own pod watch stores them.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Optional

from ..contract import JOB_UID_LABEL

#: the fields kept of an object: each key kept maps to None (its value whole) or to
#: the fields kept of its value (a mapping, or each mapping of a list)
Fields = Mapping[str, Optional["Fields"]]

_CONDITION: Fields = MappingProxyType(dict.fromkeys(
    ("type", "status", "reason", "message", "lastTransitionTime")))

#: what is read of a stored Workload, and by whom (``st``: :mod:`jupyterhub_gpu.kueue.status`)
WORKLOAD_FIELDS: Fields = MappingProxyType({
    "metadata": MappingProxyType({
        # a queue's order and place (st.pending_order, st.queue_position), the watch's
        # uid index, the preemptor's team (kueue.messages.preempting_job)
        "name": None, "namespace": None, "uid": None,
        "creationTimestamp": None,  # st.pending_order: older first
        "deletionTimestamp": None,  # hub.availability.pending
        # a pod's or a Job's Workload (st.workload_for, the watch's job-uid index)
        "labels": MappingProxyType({JOB_UID_LABEL: None}),
        # the training Job it was made for (st.owner_job), the caller's own job or
        # notebook that preempted another (jobs.words.preemptor)
        "ownerReferences": MappingProxyType(dict.fromkeys(("apiVersion", "kind", "name",
                                                           "uid"))),
    }),
    "spec": MappingProxyType({
        "queueName": None,  # the queue a position is counted in
        "priority": None,  # st.pending_order: higher first
    }),
    "status": MappingProxyType({
        # QuotaReserved, Admitted, Finished, Preempted, Evicted: st.is_true,
        # st.never_fits (its message), st.preemptor_ids (Preempted's message), the
        # words of a stop (Preempted's reason), usage.records (QuotaReserved's time)
        "conditions": _CONDITION,
        # the pool Kueue admitted it to (st.admitted_pool)
        "admission": MappingProxyType({
            "podSetAssignments": MappingProxyType({"flavors": None})}),
    }),
})


def pruned(obj: Mapping[str, Any], fields: Fields) -> dict[str, Any]:
    """A copy of ``obj`` with only ``fields`` (those ``obj`` has)."""
    kept = {}
    for key, inner in fields.items():
        if key not in obj:
            continue
        value = obj[key]
        if inner is not None and isinstance(value, Mapping):
            value = pruned(value, inner)
        elif inner is not None and isinstance(value, list):
            value = [pruned(v, inner) if isinstance(v, Mapping) else v for v in value]
        kept[key] = value
    return kept


def pruned_workload(workload: Mapping[str, Any]) -> dict[str, Any]:
    """What a watch keeps of a Kueue Workload (:data:`WORKLOAD_FIELDS`)."""
    return pruned(workload, WORKLOAD_FIELDS)
