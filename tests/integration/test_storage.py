"""AKS's storage semantics in the dev cluster (jupyterhub_gpu/devcluster/storage.py):
claims of AKS's classes get volumes from the emulated CSI provisioner, an Azure Disk
(``managed-csi``, ReadWriteOnce) is attached to one node at a time by the REAL
attach-detach controller of kube-controller-manager, whose ``Multi-Attach error``
event keeps a second node's pod from starting until the first pod is gone
(kubernetes/kubernetes ``pkg/controller/volume/attachdetach/reconciler/reconciler.go``,
``reportMultiAttachError``), and an Azure Files share (``azurefile-csi``,
ReadWriteMany) needs no attaching and serves pods on two nodes at once.

The pods run in namespace ``default`` (no Kueue) on pool ``cpu``, each pair kept on two
nodes by a required pod anti-affinity (Karpenter starts the nodes)."""

from __future__ import annotations

import uuid

from jupyterhub_gpu.contract import (AGENTPOOL_LABEL, AZURE_DISK_CLASS, AZURE_FILES_CLASS,
                                     HOSTNAME_LABEL)
from jupyterhub_gpu.devcluster.contract import VOLUMES_ATTACHED_ANNOTATION
from jupyterhub_gpu.devcluster.storage import DISK_DRIVER, SELECTED_NODE, unique_volume_name
from jupyterhub_gpu.spec.model import USER_TAINT

from .conftest import wait_for

NAMESPACE = "default"
POOL = "cpu"


def _pod(name: str, claim: str, apart_from: str) -> dict:
    """A pod of pool cpu mounting ``claim``, never on a node with a pod labelled
    ``apart_from``; it tolerates the CPU pool's taint (z2jh's user taint) as a user pod
    does."""
    term = {"labelSelector": {"matchLabels": {"storage-test": apart_from}},
            "topologyKey": HOSTNAME_LABEL}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"storage-test": apart_from}},
            "spec": {"nodeSelector": {AGENTPOOL_LABEL: POOL},
                     "affinity": {"podAntiAffinity": {
                         "requiredDuringSchedulingIgnoredDuringExecution": [term]}},
                     "tolerations": [USER_TAINT.toleration()],
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "jupyter/minimal",
                                     "resources": {"requests": {"cpu": "100m"}},
                                     "volumeMounts": [{"name": "home",
                                                       "mountPath": "/home/jovyan"}]}],
                     "volumes": [{"name": "home",
                                  "persistentVolumeClaim": {"claimName": claim}}]}}


def _claim(name: str, storage_class: str, mode: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"storageClassName": storage_class, "accessModes": [mode],
                     "resources": {"requests": {"storage": "1Gi"}}}}


class Made:
    """Pods and claims a test made in ``default``; all deleted at the end."""

    def __init__(self, kube):
        self.kube, self.pods, self.claims = kube, [], []

    async def claim(self, name: str, storage_class: str, mode: str):
        self.claims.append(name)
        return await self.kube.core.create_namespaced_persistent_volume_claim(
            NAMESPACE, _claim(name, storage_class, mode))

    async def pod(self, name: str, claim: str, group: str):
        self.pods.append(name)
        return await self.kube.core.create_namespaced_pod(NAMESPACE, _pod(name, claim, group))

    async def phase(self, name: str) -> str:
        return (await self.kube.core.read_namespaced_pod(name, NAMESPACE)).status.phase

    async def delete_all(self) -> None:
        from kubernetes_asyncio.client import ApiException

        for name in self.pods:
            try:
                await self.kube.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise
        for name in self.claims:
            await self.kube.core.delete_namespaced_persistent_volume_claim(name, NAMESPACE)


async def _events(kube, pod: str) -> list:
    listing = await kube.core.list_namespaced_event(
        NAMESPACE, field_selector=f"involvedObject.name={pod}")
    return listing.items


async def _attachments(kube, volume: str) -> dict[str, dict]:
    """node -> VolumeAttachment of ``volume``."""
    from kubernetes_asyncio.client import StorageV1Api

    listing = await StorageV1Api(kube.api_client).list_volume_attachment()
    return {va.spec.node_name: kube.api_client.sanitize_for_serialization(va)
            for va in listing.items
            if va.spec.source.persistent_volume_name == volume}


async def test_a_disk_home_is_attached_to_one_node_at_a_time(cluster, kube):
    """Pod ``first`` runs with a managed-csi claim (provisioned for the node the
    scheduler picked); ``second``, on another node with the same claim, stays Pending
    with kube-controller-manager's Multi-Attach event until ``first`` is deleted, and
    then runs, the disk attached to its node. The disk goes with its claim."""
    run = uuid.uuid4().hex[:6]
    made = Made(kube)
    claim, first, second = f"disk-{run}", f"first-{run}", f"second-{run}"
    try:
        await made.claim(claim, AZURE_DISK_CLASS, "ReadWriteOnce")
        await made.pod(first, claim, run)
        await wait_for(lambda: _is(made, first, "Running"), timeout=120,
                       what=f"pod {first} to run")
        bound = await kube.core.read_namespaced_persistent_volume_claim(claim, NAMESPACE)
        node_one = (await kube.core.read_namespaced_pod(first, NAMESPACE)).spec.node_name
        # WaitForFirstConsumer: provisioned for the node the scheduler chose
        assert bound.metadata.annotations[SELECTED_NODE] == node_one
        volume = kube.api_client.sanitize_for_serialization(
            await kube.core.read_persistent_volume(bound.spec.volume_name))
        assert volume["spec"]["csi"]["driver"] == DISK_DRIVER
        assert (await _attachments(kube, volume["metadata"]["name"]))[node_one][
            "status"]["attached"]

        await made.pod(second, claim, run)

        async def multi_attach():
            return [e for e in await _events(kube, second) if e.reason == "FailedAttachVolume"]

        (event, *_) = await wait_for(multi_attach, timeout=120,
                                     what=f"the Multi-Attach event of pod {second}")
        assert event.source.component == "attachdetach-controller"  # the real one
        assert event.type == "Warning"
        assert event.message == (f'Multi-Attach error for volume "{volume["metadata"]["name"]}" '
                                 f"Volume is already used by pod(s) {first}")
        pod = await kube.core.read_namespaced_pod(second, NAMESPACE)
        assert pod.spec.node_name not in (None, node_one)
        assert pod.status.phase == "Pending"
        assert VOLUMES_ATTACHED_ANNOTATION not in (pod.metadata.annotations or {})
        assert await made.phase(first) == "Running"

        await kube.core.delete_namespaced_pod(first, NAMESPACE, grace_period_seconds=0)
        await wait_for(lambda: _is(made, second, "Running"), timeout=120,
                       what=f"pod {second} to run once {first} is gone")
        attached = await _attachments(kube, volume["metadata"]["name"])
        assert set(attached) == {pod.spec.node_name}  # detached from the first node
        node = await kube.core.read_node(pod.spec.node_name)
        assert unique_volume_name(volume) in {v.name for v in node.status.volumes_attached}
    finally:
        await made.delete_all()
    await wait_for(lambda: _gone(kube, volume["metadata"]["name"]), timeout=60,
                   what="the disk to go with its claim (reclaim policy Delete)")


async def _gone(kube, volume: str) -> bool:
    return volume not in {v.metadata.name for v in (await kube.core.list_persistent_volume()).items}


async def _is(made: Made, pod: str, phase: str) -> bool:
    return await made.phase(pod) == phase


async def test_an_azure_files_share_serves_pods_on_two_nodes_and_goes_with_its_claim(
        cluster, kube):
    """azurefile-csi binds at once (Immediate), needs no attach, and two pods on two
    nodes run on it together; deleting the claim deletes its volume (reclaim Delete)."""
    run = uuid.uuid4().hex[:6]
    made = Made(kube)
    claim = f"share-{run}"
    try:
        await made.claim(claim, AZURE_FILES_CLASS, "ReadWriteMany")

        async def bound():
            pvc = await kube.core.read_namespaced_persistent_volume_claim(claim, NAMESPACE)
            return pvc if pvc.status.phase == "Bound" else None

        pvc = await wait_for(bound, timeout=60, what=f"claim {claim} to be bound")
        assert SELECTED_NODE not in (pvc.metadata.annotations or {})  # before any pod
        names = [f"share-a-{run}", f"share-b-{run}"]
        for name in names:
            await made.pod(name, claim, run)
        for name in names:
            await wait_for(lambda n=name: _is(made, n, "Running"), timeout=120,
                           what=f"pod {name} to run")
        nodes = {(await kube.core.read_namespaced_pod(n, NAMESPACE)).spec.node_name
                 for n in names}
        assert len(nodes) == 2
        assert await _attachments(kube, pvc.spec.volume_name) == {}
    finally:
        await made.delete_all()
    await wait_for(lambda: _gone(kube, pvc.spec.volume_name), timeout=60,
                   what=f"volume {pvc.spec.volume_name} to go")
