"""The GPU node pools as Terraform input: ``config/terraform/pools.auto.tfvars.json``.

``config/terraform/main.tf`` creates one ``azurerm_kubernetes_cluster_node_pool`` per
entry of ``var.gpu_pools`` (``for_each``). Every value here comes from the spec, so
the nodes carry exactly the labels and taints GPUSpawner's pods select and tolerate:

* ``node_labels``: :func:`~jupyterhub_gpu.builders.deviceplugin.pool_labels` (the
  device-plugin config and MIG geometry), plus, for spot pools, the
  ``kubernetes.azure.com/scalesetpriority=spot`` label that AKS sets itself -- listed
  so that Terraform's view equals the node's (azurerm's spot example does the same);
* ``node_taints``: :attr:`~jupyterhub_gpu.spec.Pool.taints` as ``key=value:Effect``,
  the spot taint included for the same reason (AKS adds it to every spot pool and it
  cannot be removed);
* ``gpu_instance``: AKS's MIG instance profile for MIG pools (``MIG3g`` for
  ``3g.40gb`` on an A100 80GB). AKS offers one geometry per compute size: the one
  with the most instances per GPU. A spec MIG profile AKS cannot make is an error.
"""

from __future__ import annotations

from ..builders.deviceplugin import pool_labels
from ..spec import SPOT_LABEL, Platform, Pool, SharingMode

AKS_GPU_INSTANCES = ("MIG1g", "MIG2g", "MIG3g", "MIG4g", "MIG7g")


class BundleError(ValueError):
    """The spec asks for something the AKS bundle cannot express."""


def gpu_instance(pool: Pool) -> str | None:
    """AKS's ``gpu_instance`` for ``pool``; None unless it is a MIG pool."""
    mig = pool.sharing.mig_profile
    if pool.sharing.mode is not SharingMode.MIG or mig is None:
        return None
    compute = mig.split(".", 1)[0]  # "3g"
    same_size = [p for p in pool.gpu.mig if p.name.split(".", 1)[0] == compute]
    aks = max(same_size, key=lambda p: p.per_gpu, default=None)
    value = f"MIG{compute}"
    if aks is None or aks.name != mig or value not in AKS_GPU_INSTANCES:
        made = f"{value} makes {aks.name}" if aks else f"AKS has no {value}"
        raise BundleError(f"pool {pool.name!r}: sharing: migProfile: AKS cannot partition "
                          f"{pool.gpu.name} into {mig} ({made}); use one of: "
                          f"{', '.join(_aks_profiles(pool))}")
    return value


def _aks_profiles(pool: Pool) -> list[str]:
    best: dict[str, tuple[int, str]] = {}
    for p in pool.gpu.mig:
        compute = p.name.split(".", 1)[0]
        if compute not in best or p.per_gpu > best[compute][0]:
            best[compute] = (p.per_gpu, p.name)
    return [name for _, name in best.values() if f"MIG{name.split('.')[0]}" in AKS_GPU_INSTANCES]


def node_taints(pool: Pool) -> list[str]:
    return [f"{t.key}={t.value}:{t.effect}" for t in pool.taints]


def node_labels(pool: Pool) -> dict[str, str]:
    labels = dict(pool_labels(pool))
    if pool.spot:
        labels[SPOT_LABEL] = "spot"
    return dict(sorted(labels.items()))


def pool_vars(pool: Pool) -> dict:
    """One entry of ``var.gpu_pools`` (see ``config/terraform/variables.tf``)."""
    return {
        "vm_size": pool.vm_size,
        "min_count": pool.min_nodes,
        "max_count": pool.max_nodes,
        "spot": pool.spot,
        "gpu_instance": gpu_instance(pool),
        "node_labels": node_labels(pool),
        "node_taints": node_taints(pool),
    }


def tfvars(platform: Platform) -> dict:
    """The whole ``pools.auto.tfvars.json`` document."""
    return {"gpu_pools": {pool.name: pool_vars(pool) for pool in platform.pools}}
