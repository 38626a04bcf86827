"""AKS's storage, as the dev cluster has it: the storage classes and CSI drivers AKS
installs, and the rules of the CSI sidecars and of the kubelet that the dev cluster's
storage process (:mod:`.csi`) plays (pure: objects in, objects or verdicts out).

What is real and what is emulated:

* kube-controller-manager's **persistent-volume binder** (binding, and asking an
  external provisioner for a volume) and its **attach-detach controller** are the real
  ones (``components.CONTROLLERS``): it creates a VolumeAttachment for every CSI volume
  whose driver requires attaching, and when a ReadWriteOnce volume is attached to one
  node and wanted on another it writes the ``FailedAttachVolume`` event ``Multi-Attach
  error for volume "..." Volume is already used by pod(s) ...`` itself
  (kubernetes/kubernetes ``pkg/controller/volume/attachdetach/reconciler/reconciler.go``,
  ``reportMultiAttachError``). It manages only the nodes whose kubelet says so: kwok's
  ``node-initialize`` stage sets :data:`CONTROLLER_MANAGED_ATTACH` on every node, as a
  kubelet with ``--enable-controller-attach-detach`` (its default) does.
* The **storage classes** and **CSIDriver objects** are AKS's built-in ones
  (kubernetes-sigs/azuredisk-csi-driver ``deploy/example/storageclass-azuredisk-csi.yaml``
  and ``deploy/csi-azuredisk-driver.yaml``; kubernetes-sigs/azurefile-csi-driver
  ``deploy/example/storageclass-azurefile-csi.yaml`` and ``deploy/csi-azurefile-driver.yaml``;
  AKS's classes as ``kubectl get sc`` shows them). Azure Disk needs attaching (one
  node at a time); Azure Files does not.
* Emulated: kubernetes-csi/external-provisioner (``pkg/controller/controller.go``: a
  claim the binder annotated with :data:`STORAGE_PROVISIONER` gets a PV named
  ``pvc-<claim uid>``; under ``WaitForFirstConsumer`` only once the scheduler has put
  :data:`SELECTED_NODE` on it; a released ``Delete`` volume is deleted), without a
  disk or share behind it; kubernetes-csi/external-attacher (``pkg/controller/csi_handler.go``:
  a VolumeAttachment gets its finalizer and ``status.attached: true``; on deletion the
  finalizer goes, which lets the attach-detach controller finish the detach); and the
  kubelet's wait for attached volumes (kubernetes ``pkg/kubelet/volumemanager``: a
  pod's containers start only once every volume that needs attaching is listed in its
  node's ``status.volumesAttached``), which :func:`volumes_ready` decides and
  :data:`~jupyterhub_gpu.devcluster.contract.VOLUMES_ATTACHED_ANNOTATION` tells kwok.
* Not emulated: topology (AKS disks carry a zone node affinity), volume limits per node,
  resizing, snapshots, mounting (kwok runs no containers; the pod runner gives a job's
  volumes directories of its own).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..contract import AZURE_DISK_CLASS, AZURE_FILES_CLASS, AZURE_FILES_PREMIUM_CLASS

STORAGE_API_VERSION = "storage.k8s.io/v1"
DISK_DRIVER = "disk.csi.azure.com"
FILE_DRIVER = "file.csi.azure.com"
#: the class a claim without ``storageClassName`` gets (the DefaultStorageClass
#: admission plugin). AKS marks its class ``default`` so: a disk.csi.azure.com class
#: with the same parameters and binding mode as ``managed-csi``; the dev cluster marks
#: ``managed-csi`` itself, so that a claim without a class gets the same ReadWriteOnce
#: Azure Disk it would get on AKS
DEFAULT_CLASS = AZURE_DISK_CLASS
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"

# Kubernetes' names (k8s.io/component-helpers storage/volume, kubernetes
# pkg/volume/util, kubernetes-csi/external-provisioner and external-attacher)
SELECTED_NODE = "volume.kubernetes.io/selected-node"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
PROVISIONER_FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"
CONTROLLER_MANAGED_ATTACH = "volumes.kubernetes.io/controller-managed-attach-detach"
CSI_PLUGIN = "kubernetes.io/csi"

#: where the emulated volumes "live": a handle shaped like the real drivers' own
SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
RESOURCE_GROUP = "mc_devcluster"


@dataclass(frozen=True)
class StorageClass:
    """One of AKS's built-in classes."""

    name: str
    driver: str
    parameters: tuple[tuple[str, str], ...]
    binding_mode: str
    mount_options: tuple[str, ...] = ()

    @property
    def waits_for_consumer(self) -> bool:
        return self.binding_mode == "WaitForFirstConsumer"

    def manifest(self) -> dict:
        meta: dict[str, Any] = {"name": self.name}
        if self.name == DEFAULT_CLASS:
            meta["annotations"] = {DEFAULT_CLASS_ANNOTATION: "true"}
        obj = {"apiVersion": STORAGE_API_VERSION, "kind": "StorageClass", "metadata": meta,
               "provisioner": self.driver, "parameters": dict(self.parameters),
               "reclaimPolicy": "Delete", "volumeBindingMode": self.binding_mode,
               "allowVolumeExpansion": True}
        if self.mount_options:
            obj["mountOptions"] = list(self.mount_options)
        return obj


_FILE_MOUNT = ("mfsymlinks", "actimeo=30", "nosharesock")
CLASSES = (
    StorageClass(AZURE_DISK_CLASS, DISK_DRIVER, (("skuname", "StandardSSD_LRS"),),
                 "WaitForFirstConsumer"),
    StorageClass(AZURE_FILES_CLASS, FILE_DRIVER, (("skuName", "Standard_LRS"),),
                 "Immediate", _FILE_MOUNT),
    StorageClass(AZURE_FILES_PREMIUM_CLASS, FILE_DRIVER, (("skuName", "Premium_LRS"),),
                 "Immediate", _FILE_MOUNT),
)
#: driver -> whether its volumes are attached to a node first (CSIDriver attachRequired)
ATTACH_REQUIRED = {DISK_DRIVER: True, FILE_DRIVER: False}


def storage_objects() -> list[dict]:
    """The CSIDrivers and StorageClasses ``devcluster up`` applies."""
    drivers = [{"apiVersion": STORAGE_API_VERSION, "kind": "CSIDriver",
                "metadata": {"name": driver},
                "spec": {"attachRequired": required, "podInfoOnMount": not required,
                         "fsGroupPolicy": "File" if required else "ReadWriteOnceWithFSType",
                         "volumeLifecycleModes": ["Persistent"]}}
               for driver, required in ATTACH_REQUIRED.items()]
    return drivers + [c.manifest() for c in CLASSES]


def storage_class(name: str | None) -> StorageClass | None:
    return next((c for c in CLASSES if c.name == name), None)


def volume_handle(driver: str, volume_name: str) -> str:
    """The handle the driver would return: a managed disk's resource ID, or Azure
    Files' ``resourceGroup#account#share`` (the share named after the volume)."""
    if driver == DISK_DRIVER:
        return (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}"
                f"/providers/Microsoft.Compute/disks/{volume_name}")
    return f"{RESOURCE_GROUP}#fdevcluster#{volume_name}#"


def volume_for(claim: Mapping[str, Any]) -> dict | None:
    """The PV the emulated external-provisioner creates for ``claim``, or None while it
    must not (not asked by the binder, bound already, or waiting for a node)."""
    meta, spec = claim.get("metadata") or {}, claim.get("spec") or {}
    annotations = meta.get("annotations") or {}
    cls = storage_class(spec.get("storageClassName"))
    if (cls is None or annotations.get(STORAGE_PROVISIONER) != cls.driver
            or spec.get("volumeName") or meta.get("deletionTimestamp")):
        return None
    if cls.waits_for_consumer and not annotations.get(SELECTED_NODE):
        return None
    name = f"pvc-{meta['uid']}"
    pv_spec = {"capacity": {"storage": ((spec.get("resources") or {}).get("requests")
                                        or {}).get("storage", "1Gi")},
               "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
               "persistentVolumeReclaimPolicy": "Delete",
               "storageClassName": cls.name,
               "volumeMode": spec.get("volumeMode", "Filesystem"),
               "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                            "namespace": meta["namespace"], "name": meta["name"],
                            "uid": meta["uid"]},
               "csi": {"driver": cls.driver, "volumeHandle": volume_handle(cls.driver, name),
                       "volumeAttributes": dict(cls.parameters)}}
    if cls.mount_options:
        pv_spec["mountOptions"] = list(cls.mount_options)
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {PROVISIONED_BY: cls.driver},
                         "finalizers": [PROVISIONER_FINALIZER]},
            "spec": pv_spec}


def ours(volume: Mapping[str, Any]) -> bool:
    annotations = (volume.get("metadata") or {}).get("annotations") or {}
    return annotations.get(PROVISIONED_BY) in ATTACH_REQUIRED


def to_delete(volume: Mapping[str, Any]) -> bool:
    """A volume the provisioner made whose claim is gone (Released) and whose reclaim
    policy is Delete: the driver deletes the disk or share, then the PV goes."""
    return (ours(volume) and (volume.get("status") or {}).get("phase") == "Released"
            and (volume.get("spec") or {}).get("persistentVolumeReclaimPolicy") == "Delete")


def attacher_finalizer(driver: str) -> str:
    """external-attacher's finalizer on the VolumeAttachments of ``driver``."""
    return "external-attacher/" + re.sub(r"[^a-zA-Z0-9-]", "-", driver)


def attacher_action(attachment: Mapping[str, Any]) -> str | None:
    """What the emulated external-attacher does with a VolumeAttachment: ``attach``
    (finalizer, then ``status.attached``), ``detach`` (drop its finalizer) or None."""
    meta, spec = attachment.get("metadata") or {}, attachment.get("spec") or {}
    if not ATTACH_REQUIRED.get(spec.get("attacher")):
        return None
    finalizer = attacher_finalizer(spec["attacher"])
    if meta.get("deletionTimestamp"):
        return "detach" if finalizer in (meta.get("finalizers") or []) else None
    return None if (attachment.get("status") or {}).get("attached") else "attach"


def unique_volume_name(volume: Mapping[str, Any]) -> str | None:
    """The name the attach-detach controller lists in a node's ``volumesAttached``
    for a CSI volume (``kubernetes.io/csi/<driver>^<handle>``)."""
    csi = (volume.get("spec") or {}).get("csi")
    return f"{CSI_PLUGIN}/{csi['driver']}^{csi['volumeHandle']}" if csi else None


def _claims(pod: Mapping[str, Any]) -> list[str]:
    return [v["persistentVolumeClaim"]["claimName"]
            for v in (pod.get("spec") or {}).get("volumes") or [] if v.get("persistentVolumeClaim")]


def waits_for_volumes(pod: Mapping[str, Any]) -> bool:
    """A pod kwok starts only once told its volumes are attached: one bound to a node,
    not deleted, Pending, mounting a claim."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return bool(spec.get("nodeName") and not meta.get("deletionTimestamp")
                and (pod.get("status") or {}).get("phase") == "Pending" and _claims(pod))


def volumes_ready(pod: Mapping[str, Any], claims: Mapping[tuple[str, str], dict],
                  volumes: Mapping[str, dict], node: Mapping[str, Any] | None) -> bool:
    """The kubelet's verdict: every claim the pod mounts is bound, and every volume
    whose driver requires attaching is in the node's ``status.volumesAttached``."""
    if node is None:
        return False
    attached = {v.get("name") for v in (node.get("status") or {}).get("volumesAttached") or []}
    namespace = pod["metadata"]["namespace"]
    for name in _claims(pod):
        claim = claims.get((namespace, name))
        volume = volumes.get(((claim or {}).get("spec") or {}).get("volumeName") or "")
        if volume is None:
            return False
        csi = (volume.get("spec") or {}).get("csi")
        if csi and ATTACH_REQUIRED.get(csi["driver"], True) \
                and unique_volume_name(volume) not in attached:
            return False
    return True

