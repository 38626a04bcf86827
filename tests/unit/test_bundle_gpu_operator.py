"""The GPU Operator's values (``config/gpu-operator-values.yaml``): the operator owns
driver, toolkit and MIG layout on every GPU pool, and each node's device plugin runs
the sharing config its label names, unchanged by a global MIG strategy.

Facts of gpu-operator v26.7.0 used here (``deployments/gpu-operator``): the chart's
default ``mig.strategy`` is ``single``; the ClusterPolicy template writes
``spec.mig.strategy`` only ``{{- if .Values.mig.strategy }}``; the operator then sets
``MIG_STRATEGY`` on the device plugin and GPU feature discovery
(``controllers/object_controls.go: applyMIGConfiguration``) and leaves it unset for an
empty strategy. The device plugin reads ``MIG_STRATEGY`` as its ``--mig-strategy``
flag, and a flag that is set overrides the config file's ``flags.migStrategy``
(k8s-device-plugin ``api/config/v1``: ``updateFromCLIFlag``).
"""

from __future__ import annotations

import json

import pytest
import yaml

from jupyterhub_gpu.bundle.check import advertised_resource

from ..kueue_admission import tolerates

CHART_DEFAULT_MIG_STRATEGY = "single"


@pytest.fixture(scope="module")
def values(repo_root) -> dict:
    return yaml.safe_load((repo_root / "config/gpu-operator-values.yaml").read_text())


@pytest.fixture(scope="module")
def plugin_configs(repo_root) -> dict:
    return yaml.safe_load((repo_root / "config/device-plugin.yaml").read_text())


def mig_strategy_env(values: dict) -> str | None:
    """``MIG_STRATEGY`` on the device plugin, as the chart and operator set it."""
    strategy = (values.get("mig") or {}).get("strategy", CHART_DEFAULT_MIG_STRATEGY)
    return strategy or None


def test_no_global_mig_strategy(values):
    assert mig_strategy_env(values) is None


def test_each_pool_advertises_what_its_own_config_says(values, plugin_configs, platform):
    """With the environment the operator gives the plugin, each node's effective
    config still advertises the pool's resource, ``nvidia.com/gpu`` (a global
    ``mixed`` would turn the MIG pool's slices into ``nvidia.com/mig-<profile>``)."""
    env = mig_strategy_env(values)
    assert "" not in plugin_configs["data"], "a CPU-only pool has no device-plugin config"
    for pool in platform.gpu_pools:
        config = yaml.safe_load(plugin_configs["data"][pool.device_plugin_config])
        if env:
            config["flags"]["migStrategy"] = env
        assert advertised_resource(config, pool) == pool.resource_name, pool.name


def test_a_global_mixed_strategy_would_break_the_mig_pool(platform, plugin_configs):
    """What the test above guards against."""
    pool = next(p for p in platform.pools if p.sharing.mig_profile)
    config = yaml.safe_load(plugin_configs["data"][pool.device_plugin_config])
    assert advertised_resource(config, pool) == "nvidia.com/gpu" == pool.resource_name
    config["flags"]["migStrategy"] = mig_strategy_env({"mig": {"strategy": "mixed"}})
    assert advertised_resource(config, pool) == "nvidia.com/mig-3g.40gb"


def test_the_operator_owns_driver_toolkit_and_mig(values, repo_root):
    assert values["driver"]["enabled"] is True
    assert values["toolkit"]["enabled"] is True
    assert values["migManager"]["enabled"] is True
    assert {"name": "WITH_REBOOT", "value": "true"} in values["migManager"]["env"]
    pools = json.loads((repo_root / "config/terraform/pools.auto.tfvars.json").read_text())
    for name, pool in pools["gpu_pools"].items():
        assert "gpu_instance" not in pool, f"{name}: AKS would partition MIG too"
        assert ("nvidia.com/mig.config" in pool["node_labels"]) is pool["gpu"], name


def test_the_device_plugin_reads_the_bundles_configs(values, plugin_configs):
    config = values["devicePlugin"]["config"]
    assert config["name"] == plugin_configs["metadata"]["name"]
    assert config["default"] in plugin_configs["data"]


@pytest.mark.parametrize("path", [("daemonsets",), ("node-feature-discovery", "worker")])
def test_operator_pods_tolerate_every_gpu_pool(values, platform, path):
    """... and no CPU pool: nothing of the operator's has work there."""
    section = values
    for key in path:
        section = section[key]
    for pool in platform.pools:
        for taint in pool.taints:
            assert tolerates(section["tolerations"], taint.as_dict()) == pool.has_gpu, (
                pool.name, taint)
