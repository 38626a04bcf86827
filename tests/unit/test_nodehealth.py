"""A running server's node that stopped answering: when the hub gives up on it, and
what its user reads."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.kueue.messages import NODE_LOST, node_lost_notice
from jupyterhub_gpu.hub.nodehealth import lost, not_ready_since

NOW = datetime(2026, 12, 3, 10, 5, tzinfo=timezone.utc)


def node(status, since="2026-12-03T10:03:30Z"):
    ready = {"type": "Ready", "status": status, "lastTransitionTime": since}
    return {"metadata": {"name": "n1"}, "status": {"conditions": [ready]}}


@pytest.mark.parametrize("the_node,after,expected", [
    (node("True"), 0, None),
    (node("False"), 60, datetime(2026, 12, 3, 10, 3, 30, tzinfo=timezone.utc)),  # 90 s
    (node("Unknown"), 60, datetime(2026, 12, 3, 10, 3, 30, tzinfo=timezone.utc)),
    (node("Unknown"), 120, None),  # not yet long enough
    (None, 0, None),  # a node the watch does not have is not judged
    ({"metadata": {"name": "n1"}, "status": {}}, 0, None),
])
def test_lost(the_node, after, expected):
    assert lost(the_node, NOW, after) == expected


def test_not_ready_since_is_when_ready_left_true():
    assert not_ready_since(node("Unknown", "2026-12-03T09:00:00Z")) == datetime(
        2026, 12, 3, 9, 0, tzinfo=timezone.utc)


def test_the_notice_names_the_node_and_keeps_the_files():
    since = datetime(2026, 12, 3, 10, 3, 30, tzinfo=timezone.utc)
    notice = node_lost_notice("aks-t4dev-1", since, NOW, "/home/jovyan/checkpoints", "t4dev")
    assert notice.message == (
        NODE_LOST.format(node="aks-t4dev-1", since=since) + " Your files are kept; start "
        "your server again to get another node; your checkpoints are in "
        "/home/jovyan/checkpoints.")
    assert "node aks-t4dev-1 stopped responding (not ready since 10:03 UTC on 2026-12-03)" \
        in notice.message
    assert (notice.reason, notice.pool, notice.at) == ("evicted", "t4dev", NOW.isoformat())
