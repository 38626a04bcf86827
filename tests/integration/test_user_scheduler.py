"""z2jh's user-scheduler schedules the notebooks, and Karpenter still adds nodes for them.

The z2jh 4.4.0 chart (jupyterhub/zero-to-jupyterhub-k8s) enables
``scheduling.userScheduler`` by default and so do our values: its hub config
(``files/hub/jupyterhub_config.py``) sets ``c.KubeSpawner.scheduler_name`` to the
user-scheduler, a second kube-scheduler with the chart's configuration
(``templates/scheduling/user-scheduler/configmap.yaml``). The cluster fixture runs it
with that configuration as ``helm template`` renders it (tests/integration/conftest.py).
Karpenter provisions for any pod some scheduler marked ``PodScheduled=False,
Unschedulable``, whichever scheduler it names (kubernetes-sigs/karpenter
``pkg/utils/pod/scheduling.go``, ``IsProvisionable`` and ``FailedToSchedule``: no
``schedulerName`` check), so a pool at zero still grows for a user-scheduler pod.
"""

from __future__ import annotations

import pytest

from .conftest import wait_for

DEFAULT_SCHEDULER = "default-scheduler"


async def test_the_user_scheduler_places_a_notebook_on_the_node_karpenter_adds(
        cluster, spawn, kube, cluster_platform):
    name = cluster["user_scheduler"]
    if not name:
        pytest.skip("the z2jh chart is not beside the checkout: no user-scheduler runs "
                    "(../shared/reference/README.md)")
    pool = cluster_platform.pool("t4dev")
    await wait_for(lambda: kube.pool_is_empty(pool.name), timeout=180,
                   what="pool t4dev to have no node left from earlier tests")
    spawner = await spawn("sched-user", ["data-science"], "t4-shared")
    pod = await kube.core.read_namespaced_pod(spawner.pod_name, spawner.namespace)
    assert pod.spec.scheduler_name == name != DEFAULT_SCHEDULER
    events = (await kube.core.list_namespaced_event(
        spawner.namespace, field_selector=f"involvedObject.uid={pod.metadata.uid}")).items
    by_reason = {}
    for event in events:
        by_reason.setdefault(event.reason, []).append(event)
    # no node at first: the user-scheduler marked the pod Unschedulable, Karpenter
    # started a node for it, and the user-scheduler bound the pod there
    assert {e.reporting_component for e in by_reason["FailedScheduling"]} == {name}
    (scheduled,) = by_reason["Scheduled"]
    assert scheduled.reporting_component == name  # events.k8s.io's reportingController
    assert [n.metadata.name for n in await kube.pool_nodes(pool.name)] == [pod.spec.node_name]
    claims = await kube.node_claims(pool.name)
    assert [c["status"].get("nodeName") for c in claims] == [pod.spec.node_name]
    # Karpenter's own word that it provisioned for this pod (its
    # pkg/controllers/provisioning/scheduling/events.go, NominatePodEvent)
    claim = claims[0]["metadata"]["name"]
    assert any(f"nodeclaim/{claim}" in e.message for e in by_reason["Nominated"]), events
