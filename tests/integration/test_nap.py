"""A pool of AKS Node Auto Provisioning, on the dev cluster: it scales like any pool
(the dev cluster's Karpenter has a NodePool per pool), and its notebooks and Kueue
ResourceFlavor select ``karpenter.sh/nodepool``, which Karpenter puts on the nodes it
starts. The NodePool and AKSNodeClass the bundle generates for AKS pass the API
server's validation of the CRDs AKS installs, CEL rules included."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from kubernetes_asyncio.client import ApiException, ApiextensionsV1Api

from jupyterhub_gpu.bundle.nap import aks_node_class, aks_node_pool
from jupyterhub_gpu.contract import AGENTPOOL_LABEL, NODEPOOL_LABEL
from jupyterhub_gpu.spec.model import Autoscaler

from .conftest import KARPENTER, KUEUE, wait_for

POOL = "t4lend"  # node-auto-provisioning in tests/integration/platform.yaml
#: AKS's NodePool CRD is served here under a group of its own: the dev cluster's
#: Karpenter owns nodepools.karpenter.sh
STAND_IN_GROUP = "nodepools-of-aks.jupyterhub-gpu.test"


async def test_a_nap_pool_scales_and_is_selected_by_its_node_pool(spawn, kube,
                                                                   cluster_platform):
    pool = cluster_platform.pool(POOL)
    assert pool.autoscaler is Autoscaler.NODE_AUTO_PROVISIONING
    await wait_for(lambda: kube.pool_is_empty(POOL), timeout=180,
                   what=f"pool {POOL} to have no node left from earlier tests")
    flavor = await kube.custom.get_cluster_custom_object(*KUEUE, "resourceflavors", POOL)
    assert flavor["spec"]["nodeLabels"] == {NODEPOOL_LABEL: POOL}
    spawner = await spawn("nap-owner", ["owners"], "t4-lend")
    pod = await kube.core.read_namespaced_pod(spawner.pod_name, spawner.namespace)
    assert pod.status.phase == "Running"
    assert pod.spec.node_selector == {NODEPOOL_LABEL: POOL}  # Kueue's merge added nothing
    workload = await kube.workload_for(pod)
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert set(assignment["flavors"].values()) == {POOL}
    node = await kube.core.read_node(pod.spec.node_name)
    assert node.metadata.labels[NODEPOOL_LABEL] == POOL
    assert [n.metadata.name for n in await kube.pool_nodes(POOL)] == [node.metadata.name]
    await spawner.stop(now=True)
    await wait_for(lambda: kube.pool_is_empty(POOL), timeout=180,
                   what=f"Karpenter to remove pool {POOL}'s empty node")


# -- the generated AKS objects against AKS's CRDs -----------------------------------


@pytest.fixture(scope="module")
async def aks_crds(kube, azure_karpenter_crds):
    """AKS's AKSNodeClass CRD as it is, and its NodePool CRD under
    :data:`STAND_IN_GROUP`, served by the dev cluster's API server for this module."""
    api = ApiextensionsV1Api(kube.api_client)
    node_pool = copy.deepcopy(azure_karpenter_crds["NodePool"])
    node_pool["spec"]["group"] = STAND_IN_GROUP
    node_pool["metadata"] = {"name": f"nodepools.{STAND_IN_GROUP}"}
    node_class = copy.deepcopy(azure_karpenter_crds["AKSNodeClass"])
    node_class["metadata"] = {"name": node_class["metadata"]["name"]}
    crds = [node_pool, node_class]
    for crd in crds:
        await api.create_custom_resource_definition(crd)

    async def established(name):
        crd = await api.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True"
                   for c in crd.status.conditions or [])
    for crd in crds:
        await wait_for(lambda: established(crd["metadata"]["name"]), timeout=60,
                       what=f"CRD {crd['metadata']['name']} to be established")
    yield
    for crd in crds:
        await api.delete_custom_resource_definition(crd["metadata"]["name"])

    async def gone(name):
        try:
            await api.read_custom_resource_definition(name)
        except ApiException as e:
            return e.status == 404
        return False
    for crd in crds:
        await wait_for(lambda: gone(crd["metadata"]["name"]), timeout=60,
                       what=f"CRD {crd['metadata']['name']} to be deleted")


async def _dry_run(kube, obj: dict, group: str | None = None):
    api_group, version = obj["apiVersion"].split("/")
    group = group or api_group
    body = {**obj, "apiVersion": f"{group}/{version}"}
    plural = {"NodePool": "nodepools", "AKSNodeClass": "aksnodeclasses"}[obj["kind"]]
    return await kube.custom.create_cluster_custom_object(group, version, plural, body,
                                                          dry_run="All")


async def test_the_generated_aks_objects_pass_the_crds_aks_installs(kube, cluster_platform,
                                                                     aks_crds):
    pool = cluster_platform.pool(POOL)
    spot = dataclasses.replace(cluster_platform.pool("a100spot"),
                               autoscaler=Autoscaler.NODE_AUTO_PROVISIONING)
    for each in (pool, spot):
        created = await _dry_run(kube, aks_node_class(each))
        assert created["spec"]["gpu"] == {"mode": "None"} and created["spec"]["maxPods"] == 110
        created = await _dry_run(kube, aks_node_pool(each), STAND_IN_GROUP)
        assert created["spec"]["limits"] == {"nodes": str(each.max_nodes)}
        # the dev cluster's own NodePool CRD (sigs.k8s.io/karpenter) takes it too, under
        # a name its Karpenter does not use already
        renamed = aks_node_pool(each)
        renamed["metadata"]["name"] = f"aks-{each.name}"
        await _dry_run(kube, renamed)


async def test_aks_node_pool_crd_refuses_the_agent_pool_label(kube, cluster_platform,
                                                              aks_crds):
    """The CEL rules run: the label the cluster autoscaler's pools are selected by is one
    AKS's NodePool CRD refuses, so a NAP pool is selected by its NodePool."""
    node_pool = aks_node_pool(cluster_platform.pool(POOL))
    node_pool["spec"]["template"]["metadata"]["labels"][AGENTPOOL_LABEL] = POOL
    with pytest.raises(ApiException) as e:
        await _dry_run(kube, node_pool, STAND_IN_GROUP)
    assert e.value.status == 422
    assert 'label domain \\"kubernetes.azure.com\\" is restricted' in e.value.body


async def test_the_dev_cluster_node_pools_are_the_karpenter_ones(kube, cluster_platform):
    """What the test above dry-runs is the group and version the dev cluster serves."""
    listing = await kube.custom.list_cluster_custom_object(*KARPENTER, "nodepools")
    assert POOL in {n["metadata"]["name"] for n in listing["items"]}
