"""Where a fallback profile's server runs: recorded on its pod before it may start.

Kueue picks the pool of a fallback profile at admission (the flavor in the Workload's
``status.admission.podSetAssignments[].flavors``) and puts that flavor's node labels
into the pod's nodeSelector, which the Downward API does not expose. So the pod
builder gives such a pod a scheduling gate of ours (:data:`POOL_GATE`) beside Kueue's
and reads the notebook's pool variables from annotations; the hub, watching the
Workload in the shared reflector, sets the annotations and removes the gate in one
JSON patch (:func:`record_patch`) -- the only write the hub's Role allows it on a
pod besides create and delete -- and only then can the pod be scheduled and its
container, whose environment the kubelet resolves when it starts it, see the pool.
"""

from __future__ import annotations

from typing import Mapping

from ..contract import POOL_ANNOTATION, POOL_GATE
from . import status as st


def _pointer(key: str) -> str:
    """``key`` as one JSON Pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def record_patch(pod: dict, workload: dict | None,
                 annotations: Mapping[str, Mapping[str, str]]) -> list[dict] | None:
    """The JSON patch that records the admitted pool on ``pod`` (``annotations`` of
    that pool, by pool name; the pool's name alone if it has none) and lifts our
    gate, or None while there is nothing to do (no gate of ours, not admitted yet).
    Its ``test`` makes the API refuse it if the gates moved meanwhile (Kueue lifting
    its own); the next look then builds it afresh."""
    gates = [g.get("name") for g in pod.get("spec", {}).get("schedulingGates") or []]
    pool = st.admitted_pool(workload) if st.is_true(workload, "Admitted") else None
    if POOL_GATE not in gates or pool is None:
        return None
    index = gates.index(POOL_GATE)
    patch: list[dict] = [
        {"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": POOL_GATE},
        {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
    ]
    values = dict(annotations.get(pool) or {POOL_ANNOTATION: pool})
    if pod["metadata"].get("annotations"):
        patch += [{"op": "add", "path": f"/metadata/annotations/{_pointer(key)}",
                   "value": value} for key, value in values.items()]
    else:
        patch.append({"op": "add", "path": "/metadata/annotations", "value": values})
    return patch


async def record_pool(core_api, pod: dict, workload: dict | None,
                      annotations: Mapping[str, Mapping[str, str]]) -> str | None:
    """Apply :func:`record_patch` to ``pod`` if it has one; the pool recorded, or None."""
    patch = record_patch(pod, workload, annotations)
    if patch is None:
        return None
    meta = pod["metadata"]
    await core_api.patch_namespaced_pod(meta["name"], meta["namespace"], patch)
    return st.admitted_pool(workload)
