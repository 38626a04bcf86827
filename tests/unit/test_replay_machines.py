"""The replay's billed machines from NodeClaims and Nodes shaped as the dev cluster's
Karpenter (kwok provider) makes them: a NodeClaim with its NodePool's template labels,
and, a boot later, a Node with the claim's providerID."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.builders.karpenter import template_labels
from jupyterhub_gpu.contract import NODEPOOL_LABEL
from jupyterhub_gpu.replay.figures import node_hours
from jupyterhub_gpu.replay.machines import follow, listed

from .replay_traces import h


def stamp(hours: float) -> str:
    """A Kubernetes timestamp (whole seconds, Z), as the API server lists it."""
    return h(hours).strftime("%Y-%m-%dT%H:%M:%SZ")


def claim(platform, pool: str, name: str, created: float, deleted: float | None = None,
          launched: bool = True) -> dict:
    meta = {"name": name, "creationTimestamp": stamp(created),
            "labels": {**template_labels(platform.pool(pool)), NODEPOOL_LABEL: pool}}
    if deleted is not None:
        meta["deletionTimestamp"] = stamp(deleted)
    status = {"providerID": f"kwok://kwok-{name}-x-1"} if launched else {}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta,
            "status": status}


def node(platform, pool: str, claim_name: str, created: float,
         deleted: float | None = None) -> dict:
    name = f"kwok-{claim_name}-x-1"
    meta = {"name": name, "creationTimestamp": stamp(created),
            "labels": {**template_labels(platform.pool(pool)), NODEPOOL_LABEL: pool}}
    if deleted is not None:
        meta["deletionTimestamp"] = stamp(deleted)
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "spec": {"providerID": f"kwok://{name}"}}


def test_a_machine_is_billed_from_its_nodeclaim_so_its_boot_is_billed(platform):
    pools = {p.name for p in platform.pools}
    boot = platform.pool("t4dev").boot_seconds / 3600
    claims = [claim(platform, "t4dev", "t4dev-abc", 9, deleted=11)]
    nodes = [node(platform, "t4dev", "t4dev-abc", 9 + boot)]
    (machine,) = listed(claims, nodes, pools).values()
    assert (machine.pool, machine.name, machine.start, machine.end) == (
        "t4dev", "t4dev-abc", h(9), h(11))
    by_pool, gpu_hours, _ = node_hours(platform, [machine], h(24))
    assert by_pool == {"t4dev": pytest.approx(2.0)}  # not 2 h less the boot
    assert boot > 0


def test_the_end_is_the_first_deletion_seen_on_the_claim_or_its_node(platform):
    pools = {p.name for p in platform.pools}
    claims = [claim(platform, "t4dev", "a", 9), claim(platform, "t4dev", "b", 9, deleted=12)]
    nodes = [node(platform, "t4dev", "a", 9.1, deleted=10),
             node(platform, "t4dev", "b", 9.1, deleted=12.5)]
    seen = listed(claims, nodes, pools)
    assert (seen["a"].end, seen["b"].end) == (h(10), h(12))


def test_a_claim_still_booting_is_billed_and_others_are_not_the_pools(platform):
    pools = {p.name for p in platform.pools}
    booting = claim(platform, "a100spot", "spot-1", 9, launched=False)
    foreign = claim(platform, "t4dev", "other", 9)
    foreign["metadata"]["labels"].pop(NODEPOOL_LABEL)  # not one Karpenter made
    orphan = node(platform, "t4dev", "gone", 8)  # its claim already removed
    seen = listed([booting, foreign], [orphan], pools)
    assert list(seen) == ["spot-1"]
    assert (seen["spot-1"].start, seen["spot-1"].end) == (h(9), None)


def test_following_listings_keeps_the_first_start_and_end_and_ends_what_went(platform):
    pools = {p.name for p in platform.pools}
    first = listed([claim(platform, "t4dev", "a", 9), claim(platform, "t4dev", "b", 9)],
                   [], pools)
    up, gone = follow({}, first, h(9.5))
    assert (sorted(up), gone) == (["a", "b"], [])
    second = listed([claim(platform, "t4dev", "a", 9, deleted=10)], [], pools)
    up, gone = follow(up, second, h(10.2))
    # b went unseen: it ends when the watch missed it; a's deletion has begun
    assert [(m.name, m.end) for m in gone] == [("b", h(10.2))]
    assert up["a"].end == h(10)
    up, gone = follow(up, {}, h(10.4))
    assert ([(m.name, m.start, m.end) for m in gone], up) == ([("a", h(9), h(10))], {})
