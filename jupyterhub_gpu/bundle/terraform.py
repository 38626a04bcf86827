"""The node pools as Terraform input: ``config/terraform/pools.auto.tfvars.json``.

``config/terraform/main.tf`` creates one ``azurerm_kubernetes_cluster_node_pool`` per
entry of ``var.gpu_pools`` (``for_each``): one per pool the cluster autoscaler scales
(``autoscaler: cluster-autoscaler``, the default); ``acr_name`` is the spec's
``registry``. The pools of Node Auto Provisioning
are NodePools instead (:mod:`.nap`); for them only ``var.node_auto_provisioning``
(switching NAP on) is set here. ``var.cluster_autoscaler`` holds the spec's part of
the cluster autoscaler's profile, ``null`` when no pool uses it (:func:`cluster_vars`).
Every value of a node pool comes from the spec, so the nodes carry exactly the labels
and taints GPUSpawner's pods select and tolerate:

* ``node_labels``: :func:`~jupyterhub_gpu.builders.deviceplugin.pool_labels` (the
  device-plugin config and MIG geometry), plus, for spot pools, the
  ``kubernetes.azure.com/scalesetpriority=spot`` label that AKS sets itself -- listed
  so that Terraform's view equals the node's (azurerm's spot example does the same);
* ``node_taints``: :attr:`~jupyterhub_gpu.spec.model.Pool.taints` as ``key=value:Effect``,
  the spot taint included for the same reason (AKS adds it to every spot pool and it
  cannot be removed);
* ``autoscaler_tags``: the tags of :mod:`.autoscaler`, from which the Azure
  cluster-autoscaler learns, while the pool has no node, that a new node will offer
  :attr:`~jupyterhub_gpu.spec.model.Pool.resource_name` (``units_per_node`` of it) and carry
  the node selector, labels and taints above: without them an empty pool never grows
  (its pods select labels the VM size does not give), and a time-sliced or MIG pool's
  node would count as the VM's GPUs only. ``main.tf`` merges them into the pool's
  ``tags``, which AKS copies to the pool's scale set.

A CPU-only pool (``gpu: none``) is a node pool like the others, with ``gpu: false``:
no GPU taint, no device-plugin labels, no GPU resource in its tags. No pool sets
AKS's ``gpu_instance`` (MIG partitioning at node boot) and ``main.tf`` sets
``gpu_driver = "None"`` on every GPU pool: the GPU Operator installs the driver and partitions MIG
pools from the ``nvidia.com/mig.config`` label (see ``docs/gpu-operator.md``).
"""

from __future__ import annotations

import math

from ..builders.deviceplugin import pool_labels
from ..contract import SPOT_LABEL, SPOT_VALUE
from ..spec.boot import READY_MARGIN_SECONDS, slowest_boot
from ..spec.model import Platform, Pool
from .autoscaler import TagError, template_tags


class BundleError(ValueError):
    """The spec asks for something the AKS bundle cannot express."""


def node_taints(pool: Pool) -> list[str]:
    return [f"{t.key}={t.value}:{t.effect}" for t in pool.taints]


def node_labels(pool: Pool) -> dict[str, str]:
    labels = dict(pool_labels(pool))
    if pool.spot:
        labels[SPOT_LABEL] = SPOT_VALUE
    return dict(sorted(labels.items()))


def autoscaler_tags(pool: Pool) -> dict[str, str]:
    """What the autoscaler must know of a node of ``pool`` before one exists (a
    CPU-only pool's resources are its VM size's, which the autoscaler knows)."""
    try:
        return template_tags(pool.gpu_resources(pool.units_per_node),
                             {**pool.node_selector, **node_labels(pool)}, pool.taints)
    except TagError as e:
        raise BundleError(f"pool {pool.name!r}: {e}") from e


def pool_vars(pool: Pool) -> dict:
    """One entry of ``var.gpu_pools`` (see ``config/terraform/variables.tf``)."""
    return {
        "vm_size": pool.vm_size,
        "gpu": pool.has_gpu,  # main.tf sets gpu_driver = "None" on GPU pools only
        "min_count": pool.min_nodes,
        "max_count": pool.max_nodes,
        "spot": pool.spot,
        "node_labels": node_labels(pool),
        "node_taints": node_taints(pool),
        "autoscaler_tags": autoscaler_tags(pool),
    }


def scale_down_unneeded(pools: tuple[Pool, ...]) -> str:
    """The cluster autoscaler's ``scale_down_unneeded``, one value for every node pool:
    the shortest ``consolidateAfter`` of ``pools``, so no pool keeps an empty node
    longer than it asks. AKS takes whole minutes of at least one (it refuses ``30s``
    and ``0s``: MicrosoftDocs/azure-docs#123289), so the seconds are rounded up."""
    seconds = min(p.consolidate_after_seconds for p in pools)
    return f"{max(1, math.ceil(seconds / 60))}m"


#: AKS's default ``max_node_provisioning_time``, in seconds
AKS_MAX_NODE_PROVISIONING_SECONDS = 15 * 60


def max_node_provisioning_time(pools: tuple[Pool, ...]) -> str:
    """The cluster autoscaler's ``max_node_provisioning_time``: how long a new node may
    take before the scale-up counts as failed. On AKS a GPU node counts as not ready
    until it advertises ``nvidia.com/gpu`` (the driver installed; on a MIG pool after
    its reboot), so it must outlast the slowest ``bootTime`` of ``pools`` plus the
    margin Kueue allows; never below AKS's default 15m. Whole minutes (AKS takes only
    minutes)."""
    seconds = max(AKS_MAX_NODE_PROVISIONING_SECONDS,
                  slowest_boot(pools) + READY_MARGIN_SECONDS)
    return f"{math.ceil(seconds / 60)}m"


def cluster_vars(platform: Platform) -> dict:
    """``node_auto_provisioning`` (a pool uses NAP) and ``cluster_autoscaler`` (the
    spec's part of its profile; ``null`` when every pool uses NAP: then the system pool
    has a fixed size too, since AKS runs NAP alone unless a subscription feature lets
    it run beside the cluster autoscaler, see ``docs/terraform.md``)."""
    classic = tuple(p for p in platform.pools if not p.node_auto_provisioning)
    return {
        "node_auto_provisioning": len(classic) < len(platform.pools),
        "cluster_autoscaler": {
            "scale_down_unneeded": scale_down_unneeded(classic),
            "max_node_provisioning_time": max_node_provisioning_time(classic),
        } if classic else None,
    }


def tfvars(platform: Platform) -> dict:
    """The whole ``pools.auto.tfvars.json`` document."""
    return {"acr_name": platform.registry,
            "gpu_pools": {pool.name: pool_vars(pool) for pool in platform.pools
                          if not pool.node_auto_provisioning},
            **cluster_vars(platform)}
