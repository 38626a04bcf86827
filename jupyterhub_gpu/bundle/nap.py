"""The pools AKS Node Auto Provisioning scales: ``config/node-auto-provisioning.yaml``.

A pool with ``autoscaler: node-auto-provisioning`` has no
``azurerm_kubernetes_cluster_node_pool`` (it is left out of ``var.gpu_pools``) and no
cluster-autoscaler tags. NAP -- the Karpenter AKS runs for the cluster once
``node_provisioning_profile.mode = "Auto"`` -- starts its VMs from two objects per
pool, generated here:

* a **NodePool** (``karpenter.sh/v1``) named after the pool, built by the same
  :func:`~jupyterhub_gpu.builders.karpenter.node_pool` as the dev cluster's, so both
  scale alike: the pool's taints, its VM size as the only
  ``node.kubernetes.io/instance-type``, its capacity type (``spot`` or
  ``on-demand``), ``limits.nodes`` = ``maxNodes``, ``consolidationPolicy: WhenEmpty``
  after ``consolidateAfter``, ``expireAfter: Never``. Its template labels are the
  ones the admin sets on a node pool (:func:`~jupyterhub_gpu.builders.deviceplugin.
  pool_labels`: the device-plugin config and the MIG layout); AKS's NodePool CRD
  refuses ``kubernetes.azure.com/agentpool`` there, and Karpenter labels every node
  it starts ``karpenter.sh/nodepool=<pool>``, which is what the pods and the Kueue
  ResourceFlavor select (:attr:`~jupyterhub_gpu.spec.model.Pool.node_selector`);
* an **AKSNodeClass** (``karpenter.azure.com/v1beta1``) of the same name: no NVIDIA
  driver from AKS (``gpu.mode: None``: the GPU Operator installs it, as on the node
  pools, whose ``gpu_driver`` is ``None``), ``maxPods`` = the node pools' 110 (NAP's
  default under Azure CNI overlay is 250, and AKS's memory reservation, which
  ``validate`` and the Kueue quotas count, grows with it), and the node pools' OS
  disk size.

Pure functions of :class:`~jupyterhub_gpu.spec.model.Platform`.
"""

from __future__ import annotations

from ..spec.allocatable import MAX_PODS
from ..builders.deviceplugin import pool_labels
from ..builders.karpenter import node_pool
from ..contract import AKS_NODE_CLASS_API_VERSION, AKS_NODE_CLASS_GROUP
from ..spec.model import Platform, Pool

NODE_CLASS_KIND = "AKSNodeClass"
#: the OS disk of a GPU node, in GB: ``var.gpu_os_disk_size_gb``'s default in
#: ``config/terraform/variables.tf`` (CUDA notebook images are large)
OS_DISK_GB = 256
#: Ubuntu, the image family the NVIDIA GPU Operator supports on AKS
IMAGE_FAMILY = "Ubuntu"


def nap_pools(platform: Platform) -> tuple[Pool, ...]:
    return tuple(p for p in platform.pools if p.node_auto_provisioning)


def aks_node_class(pool: Pool) -> dict:
    return {
        "apiVersion": AKS_NODE_CLASS_API_VERSION,
        "kind": NODE_CLASS_KIND,
        "metadata": {"name": pool.name},
        "spec": {"imageFamily": IMAGE_FAMILY, "osDiskSizeGB": OS_DISK_GB,
                 "maxPods": MAX_PODS, "gpu": {"mode": "None"}},
    }


def aks_node_pool(pool: Pool) -> dict:
    return node_pool(pool, labels=dict(sorted(pool_labels(pool).items())),
                     node_class=(AKS_NODE_CLASS_GROUP, NODE_CLASS_KIND),
                     instance_type=pool.vm_size)


def nap_objects(platform: Platform) -> list[dict]:
    """Every NAP pool's AKSNodeClass, then its NodePool (none without NAP pools)."""
    pools = nap_pools(platform)
    return [*(aks_node_class(p) for p in pools), *(aks_node_pool(p) for p in pools)]
