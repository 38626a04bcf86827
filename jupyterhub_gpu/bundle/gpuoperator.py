"""Helm values for the NVIDIA GPU Operator: ``config/gpu-operator-values.yaml``.

On AKS every GPU node pool is created with ``gpu_driver = "None"`` and no
``gpu_instance`` (``config/terraform/main.tf``), so one component owns each job on a
GPU node, and it is the operator:

* ``driver`` and ``toolkit`` on: AKS installs neither (its node bootstrap skips the
  driver, and with it its own MIG partitioning, when the pool's GPU driver is
  ``None``), and the operator's ``nvidia`` RuntimeClass comes from its own toolkit;
* ``migManager`` on: it partitions each node as its ``nvidia.com/mig.config`` label
  says (``all-3g.40gb``, ``all-disabled``). ``WITH_REBOOT``: on Azure an A100 enters
  or leaves MIG mode only after a VM reboot, which the MIG manager then does once;
* ``mig.strategy`` empty: the chart's default (``single``) and any other value become
  a ``MIG_STRATEGY`` environment variable of the device plugin and GPU feature
  discovery, which overrides the ``migStrategy`` of the per-node config that
  ``nvidia.com/device-plugin.config`` selects. Empty leaves it to those configs
  (``single`` on MIG pools, ``none`` elsewhere), so a value set here for another
  reason (``mixed``) cannot take ``nvidia.com/gpu`` off the MIG pools' nodes;
* ``devicePlugin.config``: the ConfigMap of :mod:`~jupyterhub_gpu.builders.deviceplugin`;
* ``dcgmExporter.serviceMonitor``: the ServiceMonitor the operator creates for
  dcgm-exporter (NVIDIA/gpu-operator ``controllers/object_controls.go``), labelled so
  that kube-prometheus-stack's default selector (``release: <its release>``) picks it;
  unlabelled, no Prometheus of that chart scrapes a GPU metric;
* tolerations for every taint of the spec's GPU pools, so that the operator's DaemonSets
  (and node-feature-discovery, whose labels place them) also run on spot pools.
"""

from __future__ import annotations

from ..builders.deviceplugin import CONFIG_MAP_NAME
from .monitoring import KPS_RELEASE
from ..spec.model import Platform

def _tolerations(platform: Platform) -> list[dict]:
    seen: dict[tuple, dict] = {}
    for pool in platform.gpu_pools:
        for taint in pool.taints:
            seen.setdefault((taint.key, taint.value, taint.effect), taint.toleration())
    return list(seen.values())


def gpu_operator_values(platform: Platform) -> dict:
    """The values for ``helm install gpu-operator nvidia/gpu-operator -f ...``."""
    config = {"name": CONFIG_MAP_NAME}
    # a GPU node without the config label (none of the spec's pools) gets whole GPUs
    exclusive = [p for p in platform.pools if p.sharing.mode.whole_gpus]
    if exclusive:
        config["default"] = exclusive[0].device_plugin_config
    return {
        "driver": {"enabled": True},
        "toolkit": {"enabled": True},
        "mig": {"strategy": ""},
        "migManager": {"enabled": True, "env": [{"name": "WITH_REBOOT", "value": "true"}]},
        "devicePlugin": {"config": config},
        "dcgmExporter": {"serviceMonitor": {"enabled": True,
                                            "additionalLabels": {"release": KPS_RELEASE}}},
        "daemonsets": {"tolerations": _tolerations(platform)},
        "node-feature-discovery": {"worker": {"tolerations": _tolerations(platform)}},
    }
