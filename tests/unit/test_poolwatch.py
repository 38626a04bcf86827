"""The demo's live line per pool, from Nodes, Karpenter NodeClaims and notebook Pods."""

from __future__ import annotations

from jupyterhub_gpu.contract import NODEPOOL_LABEL
from jupyterhub_gpu.devcluster.poolwatch import pool_lines
from jupyterhub_gpu.contract import AGENTPOOL_LABEL, PROFILE_LABEL

READY = {"conditions": [{"type": "Ready", "status": "True"}]}
GATE = [{"name": "kueue.x-k8s.io/admission"}]


def _node(pool, ready=True):
    return {"metadata": {"labels": {AGENTPOOL_LABEL: pool}}, "status": READY if ready else {}}


def _claim(pool, initialized):
    status = "True" if initialized else "False"
    return {"metadata": {"labels": {NODEPOOL_LABEL: pool}},
            "status": {"conditions": [{"type": "Initialized", "status": status}]}}


def _pod(pool, node=None, gated=False, phase="Pending"):
    spec = {"nodeSelector": {AGENTPOOL_LABEL: pool}, "schedulingGates": GATE if gated else []}
    if node:
        spec["nodeName"] = node
    return {"metadata": {}, "spec": spec, "status": {"phase": phase}}


def test_a_line_per_pool_with_machines_coming_and_notebooks_waiting(platform):
    nodes = [_node("t4dev"), _node("t4dev", ready=False), _node("a100mig")]
    claims = [_claim("t4dev", True), _claim("t4dev", False), _claim("a100mig", True)]
    # a fallback profile's queued pod selects no pool: it counts on its preferred one
    fallback = {"metadata": {"labels": {PROFILE_LABEL: "a100-training"}},
                "spec": {"schedulingGates": GATE}, "status": {"phase": "Pending"}}
    pods = [_pod("t4dev", "n1", phase="Running"), _pod("t4dev", "n1", phase="Running"),
            _pod("t4dev"), _pod("t4dev", gated=True), _pod("a100mig", "n2", phase="Running"),
            fallback]
    assert pool_lines(platform, nodes, claims, pods) == [
        "pool t4dev      1 node (+1 starting) of at most 5; notebooks: 2 running, "
        "1 waiting for a node, 1 queued",
        "pool a100mig    1 node of at most 5; notebooks: 1 running, 0 waiting for a node, "
        "0 queued",
        "pool a100spot   0 nodes of at most 5; notebooks: 0 running, 0 waiting for a node, "
        "1 queued",
        "pool a100       0 nodes of at most 2; notebooks: 0 running, 0 waiting for a node, "
        "0 queued",
        "pool cpu        0 nodes of at most 10; notebooks: 0 running, 0 waiting for a node, "
        "0 queued",
    ]
