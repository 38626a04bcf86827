"""A server's node that stopped answering, from the hub's one shared node watch.

A node is NotReady when its kubelet says so or, once its heartbeats stop,
kube-controller-manager's node-lifecycle controller marks it ``Unknown``. Its pods
then answer nothing, yet their phase stays ``Running`` and KubeSpawner would go on
reporting the server running. GPUSpawner's ``poll()`` reports such a server stopped
once its node has been NotReady for ``GPUSpawner.node_lost_seconds`` (:func:`lost`),
with a notice for the user's next page, and deletes the pod at once (grace 0): on a
node that does not answer, a graceful delete would wait for that node, and the
user's next start (the same pod name) with it. PVCs are never touched.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..kueue.status import condition


def not_ready_since(node: dict | None) -> datetime | None:
    """When ``node``'s Ready condition last left True; None if it is Ready (or unknown
    to the watch: a node the hub cannot see is not judged)."""
    if node is None:
        return None
    ready = condition(node, "Ready")
    if ready is not None and ready.get("status") == "True":
        return None
    stamp = (ready or {}).get("lastTransitionTime")
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def lost(node: dict | None, now: datetime, after_seconds: float) -> datetime | None:
    """Since when ``node`` has been NotReady, if for at least ``after_seconds``."""
    since = not_ready_since(node)
    if since is None or now - since < timedelta(seconds=after_seconds):
        return None
    return since
