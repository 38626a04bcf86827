"""The rules of the dev cluster's storage emulation (jupyterhub_gpu/devcluster/storage.py),
each held against the upstream code or documentation it stands for; the running
emulation, with the real attach-detach controller, is tests/integration/test_storage.py's.
"""

from __future__ import annotations

import copy

from jupyterhub_gpu.bundle.namespaces import team_objects
from jupyterhub_gpu.devcluster import stages, storage
from jupyterhub_gpu.devcluster.components import CONTROLLERS

DISK = storage.DISK_DRIVER


def _claim(cls: str = "managed-csi", *, asked: bool = True, node: str | None = None,
           mode: str = "ReadWriteOnce") -> dict:
    annotations = {}
    if asked:  # the binder asks the class's driver (kubernetes pkg/controller/volume/persistentvolume)
        annotations[storage.STORAGE_PROVISIONER] = storage.storage_class(cls).driver
    if node:  # the scheduler's volume binding plugin, WaitForFirstConsumer
        annotations[storage.SELECTED_NODE] = node
    return {"metadata": {"name": "claim-ada", "namespace": "team", "uid": "u-1",
                         "annotations": annotations},
            "spec": {"storageClassName": cls, "accessModes": [mode],
                     "resources": {"requests": {"storage": "20Gi"}}}}


def test_the_storage_classes_are_aks_built_in_ones():
    """As ``kubectl get sc`` shows them on AKS (AKS docs "Create and manage persistent
    volumes with Azure Disks", kubernetes-sigs/azuredisk-csi-driver and azurefile-csi-driver
    deploy/example/storageclass-*.yaml): the disk class waits for its first consumer
    (the disk is made in the zone of the node its pod was placed on), Azure Files
    binds at once; every class deletes its volume with the claim and may grow."""
    classes = {o["metadata"]["name"]: o for o in storage.storage_objects()
               if o["kind"] == "StorageClass"}
    shown = {name: (c["provisioner"], c["volumeBindingMode"], c["reclaimPolicy"],
                    c["allowVolumeExpansion"]) for name, c in classes.items()}
    assert shown == {
        "managed-csi": ("disk.csi.azure.com", "WaitForFirstConsumer", "Delete", True),
        "azurefile-csi": ("file.csi.azure.com", "Immediate", "Delete", True),
        "azurefile-csi-premium": ("file.csi.azure.com", "Immediate", "Delete", True)}
    assert classes["managed-csi"]["parameters"] == {"skuname": "StandardSSD_LRS"}
    assert classes["azurefile-csi-premium"]["parameters"] == {"skuName": "Premium_LRS"}
    assert classes["azurefile-csi"]["mountOptions"] == ["mfsymlinks", "actimeo=30", "nosharesock"]
    defaults = [n for n, c in classes.items()
                if c["metadata"].get("annotations", {}).get(storage.DEFAULT_CLASS_ANNOTATION)]
    assert defaults == ["managed-csi"]  # AKS's default class is an identical disk class


def test_only_azure_disk_is_attached_to_a_node():
    """The CSIDriver objects of AKS (azuredisk-csi-driver deploy/csi-azuredisk-driver.yaml:
    attachRequired true; azurefile-csi-driver deploy/csi-azurefile-driver.yaml: false):
    the attach-detach controller makes VolumeAttachments only for the disk's."""
    drivers = {o["metadata"]["name"]: o["spec"]["attachRequired"]
               for o in storage.storage_objects() if o["kind"] == "CSIDriver"}
    assert drivers == {"disk.csi.azure.com": True, "file.csi.azure.com": False}
    assert "persistentvolume-attach-detach-controller" in CONTROLLERS


def test_the_provisioner_makes_a_volume_only_when_the_binder_and_the_scheduler_asked():
    """kubernetes-csi/external-provisioner: a claim is provisioned once the binder
    annotated it for the driver, a WaitForFirstConsumer claim only once the scheduler
    chose its node; a claim bound already, or of another class, never."""
    assert storage.volume_for(_claim(asked=False, node="n1")) is None
    assert storage.volume_for(_claim(node=None)) is None  # waits for its first consumer
    assert storage.volume_for(_claim("azurefile-csi", mode="ReadWriteMany")) is not None
    bound = _claim(node="n1")
    bound["spec"]["volumeName"] = "pvc-other"
    assert storage.volume_for(bound) is None
    other = _claim(node="n1")
    other["spec"]["storageClassName"] = "local-path"
    assert storage.volume_for(other) is None

    volume = storage.volume_for(_claim(node="n1"))
    assert volume["metadata"]["name"] == "pvc-u-1"
    spec = volume["spec"]
    assert spec["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                "namespace": "team", "name": "claim-ada", "uid": "u-1"}
    assert (spec["capacity"], spec["accessModes"], spec["storageClassName"],
            spec["persistentVolumeReclaimPolicy"], spec["csi"]["driver"]) == (
        {"storage": "20Gi"}, ["ReadWriteOnce"], "managed-csi", "Delete", DISK)
    assert storage.unique_volume_name(volume) == (
        f"kubernetes.io/csi/{DISK}^{spec['csi']['volumeHandle']}")


def test_a_released_volume_of_ours_is_deleted():
    volume = storage.volume_for(_claim(node="n1"))
    assert not storage.to_delete({**volume, "status": {"phase": "Bound"}})
    assert storage.to_delete({**volume, "status": {"phase": "Released"}})
    kept = copy.deepcopy(volume)
    kept["spec"]["persistentVolumeReclaimPolicy"] = "Retain"
    assert not storage.to_delete({**kept, "status": {"phase": "Released"}})
    del kept["metadata"]["annotations"][storage.PROVISIONED_BY]  # made by hand
    kept["spec"]["persistentVolumeReclaimPolicy"] = "Delete"
    assert not storage.to_delete({**kept, "status": {"phase": "Released"}})


def test_the_attacher_attaches_then_lets_a_deleted_attachment_go():
    """kubernetes-csi/external-attacher csi_handler.go: its finalizer
    ``external-attacher/<driver, non-alphanumerics as ->`` and status.attached on a new
    VolumeAttachment; on deletion it detaches and removes the finalizer."""
    finalizer = storage.attacher_finalizer(DISK)
    assert finalizer == "external-attacher/disk-csi-azure-com"
    new = {"metadata": {"name": "csi-1"}, "spec": {"attacher": DISK, "nodeName": "n1"}}
    assert storage.attacher_action(new) == "attach"
    attached = {**new, "metadata": {"name": "csi-1", "finalizers": [finalizer]},
                "status": {"attached": True}}
    assert storage.attacher_action(attached) is None
    deleted = copy.deepcopy(attached)
    deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert storage.attacher_action(deleted) == "detach"
    deleted["metadata"]["finalizers"] = []
    assert storage.attacher_action(deleted) is None
    other = {**new, "spec": {"attacher": storage.FILE_DRIVER, "nodeName": "n1"}}
    assert storage.attacher_action(other) is None


def _pod(claims: list[str], phase: str = "Pending") -> dict:
    return {"metadata": {"name": "jupyter-ada", "namespace": "team"},
            "spec": {"nodeName": "n2", "volumes": [
                {"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]},
            "status": {"phase": phase}}


def test_the_kubelet_starts_a_pod_once_its_disk_is_attached_to_its_node():
    """The kubelet's volume manager (kubernetes pkg/kubelet/volumemanager/reconciler:
    a controller-attached volume is mounted only once the node's status.volumesAttached
    lists it): a disk attached to another node keeps the pod waiting; a share needs
    nothing attached; an unbound claim keeps it waiting."""
    disk = storage.volume_for(_claim(node="n1"))
    share_claim = _claim("azurefile-csi", mode="ReadWriteMany")
    share_claim["metadata"].update(name="share", uid="u-2")
    share = storage.volume_for(share_claim)
    disk_claim = _claim(node="n1")
    disk_claim["spec"]["volumeName"] = disk["metadata"]["name"]
    share_claim["spec"]["volumeName"] = share["metadata"]["name"]
    claims = {("team", "claim-ada"): disk_claim, ("team", "share"): share_claim}
    volumes = {v["metadata"]["name"]: v for v in (disk, share)}
    pod = _pod(["claim-ada", "share"])
    assert storage.waits_for_volumes(pod)
    node = {"metadata": {"name": "n2"}, "status": {"volumesAttached": []}}
    assert not storage.volumes_ready(pod, claims, volumes, node)
    assert storage.volumes_ready(_pod(["share"]), claims, volumes, node)
    node["status"]["volumesAttached"] = [{"name": storage.unique_volume_name(disk),
                                          "devicePath": ""}]
    assert storage.volumes_ready(pod, claims, volumes, node)
    assert not storage.volumes_ready(pod, claims, {}, node)  # not bound yet
    assert not storage.volumes_ready(pod, claims, volumes, None)
    assert not storage.waits_for_volumes(_pod([]))
    assert not storage.waits_for_volumes(_pod(["share"], phase="Running"))


def test_kwok_nodes_register_for_the_attach_detach_controller():
    """The attach-detach controller ignores a node without the kubelet's annotation
    (attach_detach_controller.go, nodeAdd: ControllerManagedAttachAnnotation)."""
    patches = stages.node_initialize()["spec"]["next"]["patches"]
    assert patches[0] == {"root": "metadata", "type": "merge", "template":
                          f'annotations:\n  {storage.CONTROLLER_MANAGED_ATTACH}: "true"\n'}
    assert patches[1]["subresource"] == "status"


def test_each_teams_checkpoint_claim_gets_an_azure_files_volume(platform):
    """``up`` applies the team objects whole (no volume made by hand any more): each
    team's checkpoint claim is of an Azure Files class, which the provisioner serves
    at once (Immediate), ReadWriteMany."""
    claims = [o for o in team_objects(platform) if o["kind"] == "PersistentVolumeClaim"]
    assert len(claims) == len(platform.teams)
    for claim in claims:
        asked = copy.deepcopy(claim)
        asked["metadata"].update(uid="u", annotations={
            storage.STORAGE_PROVISIONER: storage.FILE_DRIVER})
        volume = storage.volume_for(asked)
        assert volume["spec"]["accessModes"] == ["ReadWriteMany"]
        assert volume["spec"]["csi"]["driver"] == storage.FILE_DRIVER
