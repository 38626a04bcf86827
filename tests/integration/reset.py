"""Back to a fresh dev cluster after each test file (tests/integration/conftest.py's
``fresh_cluster_after_each_file``), so that no file depends on what an earlier one on the
same cluster left: on pytest-xdist workers each worker's files share its cluster, in an
order the split decides.

:func:`snapshot` records, right after ``devcluster up``, the objects a fresh cluster has
of the kinds the tests create (pods, Jobs, Kueue Workloads and PersistentVolumeClaims in
the namespaces they use; nodes and Karpenter NodeClaims). :func:`reset` deletes every
such object not in it (Jobs first, with their pods; Karpenter's NodeClaims once no pod is
left, which stops their nodes), then waits until they are gone and every Kueue
ClusterQueue holds no workload, admitted, reserving or pending: its quota as free as on
a fresh cluster. It raises AssertionError naming what is left if that takes longer than
:data:`TIMEOUT` seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kubernetes.dynamic.exceptions import NotFoundError

from jupyterhub_gpu import contract
from jupyterhub_gpu.devcluster.kube import AdminClient

#: (apiVersion, kind) of the namespaced objects the tests create, deleted in this order
#: (a Job's pods and Workload go with it; a PVC once no pod uses it)
NAMESPACED = (("batch/v1", "Job"), ("v1", "Pod"), (contract.KUEUE_API_VERSION, "Workload"),
              ("v1", "PersistentVolumeClaim"))
NODE_CLAIM = (contract.KARPENTER_API_VERSION, "NodeClaim")
NODE = ("v1", "Node")
CLUSTER_QUEUE = (contract.KUEUE_API_VERSION, "ClusterQueue")
#: a ClusterQueue's counts that are 0 on a fresh cluster
QUEUE_COUNTS = ("admittedWorkloads", "reservingWorkloads", "pendingWorkloads")
TIMEOUT = 180


@dataclass(frozen=True)
class Snapshot:
    namespaces: tuple[str, ...]
    #: (apiVersion, kind, namespace, name) of every object of the kinds above
    objects: frozenset[tuple[str, str, str, str]]


def _keys(client: AdminClient, namespaces, kinds) -> set[tuple[str, str, str, str]]:
    keys = set()
    for api_version, kind in kinds:
        for ns in namespaces:
            for obj in client.list(api_version, kind, namespace=ns):
                keys.add((api_version, kind, ns or "", obj["metadata"]["name"]))
    return keys


def _all_keys(client: AdminClient, namespaces) -> set[tuple[str, str, str, str]]:
    return (_keys(client, namespaces, NAMESPACED)
            | _keys(client, [None], (NODE_CLAIM, NODE)))


def snapshot(client: AdminClient, namespaces: tuple[str, ...]) -> Snapshot:
    return Snapshot(namespaces, frozenset(_all_keys(client, namespaces)))


def _delete(client: AdminClient, key: tuple[str, str, str, str]) -> None:
    api_version, kind, ns, name = key
    try:
        client.dynamic.resources.get(api_version=api_version, kind=kind).delete(
            name=name, namespace=ns or None, body={"propagationPolicy": "Background"})
    except NotFoundError:
        pass


def _left(client: AdminClient, fresh: Snapshot, kinds) -> list[tuple[str, str, str, str]]:
    namespaced = [k for k in kinds if k in NAMESPACED]
    cluster_wide = [k for k in kinds if k not in NAMESPACED]
    now = _keys(client, fresh.namespaces, namespaced) | _keys(client, [None], cluster_wide)
    return sorted(now - fresh.objects)


def _busy_queues(client: AdminClient) -> list[str]:
    return [f"{cq['metadata']['name']} {status}" for cq in client.list(*CLUSTER_QUEUE)
            if any((status := cq.get("status") or {}).get(count) for count in QUEUE_COUNTS)]


def _wait(what: str, left, deadline: float) -> None:
    while remaining := left():
        if time.monotonic() > deadline:
            raise AssertionError(f"resetting the dev cluster after a test file: after "
                                 f"{TIMEOUT}s {what} still: {remaining}")
        time.sleep(0.5)


def reset(client: AdminClient, fresh: Snapshot) -> list[tuple[str, str, str, str]]:
    """Delete what was not on the fresh cluster and wait until it is gone and Kueue's
    queues are empty; return what was deleted."""
    deadline = time.monotonic() + TIMEOUT
    deleted = _left(client, fresh, NAMESPACED)
    for kinds in NAMESPACED:
        for key in (k for k in deleted if k[:2] == kinds):
            _delete(client, key)
        _wait(f"{kinds[1]}s left", lambda k=kinds: _left(client, fresh, [k]), deadline)
    _wait("ClusterQueues holding workloads", lambda: _busy_queues(client), deadline)
    claims = _left(client, fresh, [NODE_CLAIM])
    for key in claims:
        _delete(client, key)
    _wait("NodeClaims left", lambda: _left(client, fresh, [NODE_CLAIM]), deadline)
    nodes = _left(client, fresh, [NODE])  # Karpenter's went with their NodeClaims
    for key in nodes:
        _delete(client, key)
    _wait("nodes left", lambda: _left(client, fresh, [NODE]), deadline)
    return [*deleted, *claims, *nodes]
