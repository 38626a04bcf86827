"""NVIDIA device-plugin sharing configs and the node labels that select them.

The GPU Operator (or the device-plugin Helm chart) reads one ConfigMap whose keys are
config names; a node runs the config named by its ``nvidia.com/device-plugin.config``
label. MIG nodes are partitioned by the MIG manager from ``nvidia.com/mig.config``.

Every GPU node advertises ``nvidia.com/gpu`` (the cluster autoscaler counts a GPU node
without it unready, see :mod:`jupyterhub_gpu.spec.validate`): a shared GPU is not
renamed (``renameByDefault: false``), so its replicas are the node's count of
``nvidia.com/gpu``; a MIG pool runs the single strategy, so each MIG instance is one.
"""

from __future__ import annotations

import yaml

from ..contract import (ACCELERATOR_LABEL, AGENTPOOL_LABEL, DEVICE_PLUGIN_CONFIG_LABEL,
                        GPU_COUNT_LABEL, GPU_MEMORY_LABEL, GPU_PRESENT_LABEL, GPU_PRODUCT_LABEL,
                        GPU_REPLICAS_LABEL, GPU_RESOURCE, INSTANCE_TYPE_LABEL, MIG_CONFIG_LABEL,
                        MIG_STRATEGY_LABEL, SHARING_STRATEGY_LABEL, SPOT_LABEL, SPOT_VALUE)
from ..spec.model import Platform, Pool
CONFIG_MAP_NAME = "jupyterhub-gpu-device-plugin"


def plugin_config(pool: Pool) -> dict:
    """The device-plugin config file (``version: v1``) for one pool: its mode's flags
    and sharing block. A shared GPU keeps its name, ``nvidia.com/gpu``."""
    mode = pool.sharing.mode
    config: dict = {"version": "v1", "flags": {"migStrategy": mode.mig_strategy}}
    if mode.sharing_key:
        share: dict = {"renameByDefault": False,
                       "resources": [{"name": GPU_RESOURCE,
                                      "replicas": pool.sharing.replicas}],
                       **mode.sharing_options}
        config["sharing"] = {mode.sharing_key: share}
    return config


def pool_labels(pool: Pool) -> dict[str, str]:
    """Labels the admin sets on the AKS node pool (Terraform ``node_labels``); none on
    a CPU-only pool, where no device plugin runs."""
    if not pool.has_gpu:
        return {}
    return {DEVICE_PLUGIN_CONFIG_LABEL: pool.device_plugin_config,
            MIG_CONFIG_LABEL: pool.sharing.mode.mig_config(pool.sharing)}


def _gpu_labels(pool: Pool) -> dict[str, str]:
    """What AKS and GPU feature discovery put on a GPU node (nothing without a GPU).
    GPU feature discovery labels ``nvidia.com/gpu``'s devices (NVIDIA/k8s-device-plugin,
    internal/lm/resource.go, ``baseLabeler``; mig-strategy.go): a shared GPU's product
    ends ``-SHARED`` and its replicas are the config's; under the single MIG strategy
    the devices are the MIG instances: the product ends ``-MIG-<profile>``, the count
    is the node's instances and the memory one instance's (MiB)."""
    mode = pool.sharing.mode
    if not pool.has_gpu:
        return {}
    labels = {
        ACCELERATOR_LABEL: "nvidia",
        GPU_PRESENT_LABEL: "true",
        GPU_PRODUCT_LABEL: mode.product_label(pool.sharing, pool.gpu.product),
        GPU_COUNT_LABEL: str(pool.units_per_node if mode.partitioned else pool.gpus_per_node),
        GPU_REPLICAS_LABEL: str(pool.sharing.replicas),  # 1 unless shared
        GPU_MEMORY_LABEL: str(pool.unit_memory_gb * 1024),
        SHARING_STRATEGY_LABEL: mode.sharing_strategy,
        **pool_labels(pool),
    }
    if mode.mig_strategy != "none":
        labels[MIG_STRATEGY_LABEL] = mode.mig_strategy
    return labels


def node_labels(pool: Pool) -> dict[str, str]:
    """Every label a node of ``pool`` carries once AKS and GPU feature discovery ran."""
    labels = {AGENTPOOL_LABEL: pool.name, INSTANCE_TYPE_LABEL: pool.vm_size,
              **_gpu_labels(pool)}
    if pool.spot:
        labels[SPOT_LABEL] = SPOT_VALUE
    return labels


#: The namespace of the device-plugin ConfigMap: the GPU Operator's, which the bundle's
#: GPU Operator values install into.
NAMESPACE = "gpu-operator"


def config_map(platform: Platform, namespace: str = NAMESPACE) -> dict:
    """One ConfigMap holding every pool's config, keyed by config name."""
    data = {p.device_plugin_config: yaml.safe_dump(plugin_config(p), sort_keys=False)
            for p in platform.gpu_pools}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIG_MAP_NAME, "namespace": namespace},
            "data": dict(sorted(data.items()))}
