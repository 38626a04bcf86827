"""A live line per GPU pool for the demo's terminal: its nodes (and those Karpenter is
starting) and its notebooks (running, waiting for a node, queued), so a person
watching sees machines come and go.

:func:`pool_lines` is pure (objects in, lines out); :func:`watch_pools` polls the API
server and prints the lines whenever one changes.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from ..contract import KARPENTER_API_VERSION as KARPENTER_API, NODEPOOL_LABEL
from ..kueue import status as st
from ..contract import AGENTPOOL_LABEL, PROFILE_LABEL
from ..spec.model import Platform, Pool
from .kube import AdminClient, KubeErrors

POLL_SECONDS = 2.0


def _pool_of_pod(platform: Platform, pod: dict) -> str | None:
    """The pool the pod selects; a fallback profile's queued pod, which selects none
    until Kueue admits it, counts on its profile's preferred pool."""
    profile = platform.profile((pod["metadata"].get("labels") or {}).get(PROFILE_LABEL, ""))
    return st.selected_pool(pod) or (profile.pool if profile else None)


def _line(pool: Pool, nodes: list[dict], claims: list[dict], pods: list[dict]) -> str:
    ready = sum(1 for n in nodes if st.is_true(n, "Ready"))
    starting = sum(1 for c in claims if not st.is_true(c, "Initialized"))
    running = sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")
    queued = sum(1 for p in pods if st.is_gated(p))
    waiting = sum(1 for p in pods if not st.is_gated(p) and not p["spec"].get("nodeName"))
    machines = f"{ready} node{'' if ready == 1 else 's'}"
    if starting:
        machines += f" (+{starting} starting)"
    return (f"pool {pool.name:<10} {machines} of at most {pool.max_nodes}; notebooks: "
            f"{running} running, {waiting} waiting for a node, {queued} queued")


def pool_lines(platform: Platform, nodes: list[dict], node_claims: list[dict],
               pods: list[dict]) -> list[str]:
    """One line per pool from every Node, Karpenter NodeClaim and notebook Pod."""
    lines = []
    for pool in platform.pools:
        lines.append(_line(
            pool,
            [n for n in nodes if n["metadata"].get("labels", {}).get(AGENTPOOL_LABEL) == pool.name],
            [c for c in node_claims
             if c["metadata"].get("labels", {}).get(NODEPOOL_LABEL) == pool.name],
            [p for p in pods if _pool_of_pod(platform, p) == pool.name]))
    return lines


def _snapshot(client: AdminClient, platform: Platform) -> list[str]:
    pods = client.list("v1", "Pod", label_selector=PROFILE_LABEL)
    return pool_lines(platform, client.list("v1", "Node"),
                      client.list(KARPENTER_API, "NodeClaim"), pods)


async def watch_pools(client: AdminClient, platform: Platform, show: Callable[[str], None],
                      interval: float = POLL_SECONDS) -> None:
    """Print every pool's line when any changes, until cancelled."""
    last: list[str] = []
    while True:
        try:
            lines = await asyncio.to_thread(_snapshot, client, platform)
        except KubeErrors as e:
            lines = [f"pools: cannot read the cluster ({e})"]
        if lines != last:
            show("\n".join(lines))
            last = lines
        await asyncio.sleep(interval)
