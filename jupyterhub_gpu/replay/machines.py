"""The pools' billed machines, from the Karpenter NodeClaims and Nodes a replay lists
(pure functions; docs/replay.md, "Replaying a trace").

A cloud bills a VM from when it is asked for, boot included. Karpenter creates a
NodeClaim when it launches a machine; the dev cluster's kwok provider then waits the
pool's ``nodeRegistrationDelay`` (its ``bootTime``) before it creates the Node. So a
machine is billed from its NodeClaim's ``creationTimestamp``, not its Node's, and until
the first ``deletionTimestamp`` seen on the NodeClaim or its Node (when Karpenter began
to remove it), or until it was no longer listed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Iterable, Mapping

from ..contract import AGENTPOOL_LABEL, NODEPOOL_LABEL
from .figures import NodeLifetime


def utc(at) -> datetime:
    """A Kubernetes timestamp (RFC 3339 text or a datetime) as an aware datetime."""
    if isinstance(at, str):
        at = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def _pool(obj: dict, pools: set[str]) -> str | None:
    labels = obj["metadata"].get("labels") or {}
    pool = labels.get(AGENTPOOL_LABEL)
    return pool if pool in pools and NODEPOOL_LABEL in labels else None


def _deleted(*objs: dict | None) -> datetime | None:
    times = [utc(o["metadata"]["deletionTimestamp"]) for o in objs
             if o and o["metadata"].get("deletionTimestamp")]
    return min(times) if times else None


def listed(claims: Iterable[dict], nodes: Iterable[dict], pools: set[str]
           ) -> dict[str, NodeLifetime]:
    """The machines of ``pools`` in one listing of NodeClaims and Nodes, by NodeClaim
    name: each from its NodeClaim's creation, with an end if the deletion of the claim
    or of its Node (the one with the claim's providerID) has begun. A Node is never a
    machine of its own: Karpenter made a NodeClaim for it first, and a Node whose claim
    is gone is the end of a machine already counted."""
    by_provider = {n["spec"]["providerID"]: n for n in nodes
                   if (n.get("spec") or {}).get("providerID")}
    out: dict[str, NodeLifetime] = {}
    for claim in claims:
        pool = _pool(claim, pools)
        if pool is None:
            continue
        provider = (claim.get("status") or {}).get("providerID")
        meta = claim["metadata"]
        out[meta["name"]] = NodeLifetime(pool, meta["name"], utc(meta["creationTimestamp"]),
                                         _deleted(claim, by_provider.get(provider)))
    return out


def follow(up: Mapping[str, NodeLifetime], seen: Mapping[str, NodeLifetime], now: datetime
           ) -> tuple[dict[str, NodeLifetime], list[NodeLifetime]]:
    """The machines up after a listing (``seen``), and those gone since the last one
    (``up``): a machine keeps its first start and its first end; one no longer listed
    ends ``now`` if its deletion was never seen."""
    still: dict[str, NodeLifetime] = {}
    for name, machine in seen.items():
        before = up.get(name)
        if before is None:
            still[name] = machine
        else:
            still[name] = replace(before, end=before.end or machine.end)
    gone = [m if m.end else replace(m, end=now) for name, m in up.items() if name not in seen]
    return still, gone
