"""The sharing-mode registry: a mode is one record, and the spec, the pod, the form,
the queue messages, the device-plugin config, the docs and the checks all follow it.

``fairshare`` is made up: registering it (and nothing else) gives a pool of that mode
everything a built-in mode has. The ``fair_share_mode`` fixture registers it in a copy
of the registry, so it never leaks into another test.
"""

from __future__ import annotations

import asyncio
from types import MappingProxyType

import pytest
import yaml

from jupyterhub_gpu.spec import sharing
from jupyterhub_gpu.builders.deviceplugin import config_map, node_labels, pool_labels
from jupyterhub_gpu.builders.pod import spawn_settings
from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.bundle.check import check_device_plugin
from jupyterhub_gpu.bundle.reference import spec_reference
from jupyterhub_gpu.contract import GPU_RESOURCE, MIG_RESOURCE_PREFIX, SHARED_SUFFIX
from jupyterhub_gpu.hub.form import render_form
from jupyterhub_gpu.kueue.lifecycle import wanted
from jupyterhub_gpu.spec.parse import SpecError, parse_platform
from jupyterhub_gpu.hub.render import render_pod
from jupyterhub_gpu.spec.sharing import Parameter, SharingMode

FAIR_SHARE = SharingMode(
    name="fairshare", summary="time-slicing with an equal turn for each of `replicas` pods",
    parameter=Parameter.REPLICAS, shared=True, resource=GPU_RESOURCE,
    unit="fair share", unit_phrase="fair share", form_words="fair share (1 of {replicas})",
    plugin_config="fairshare-{replicas}", mig_strategy="none", mig_layout="all-disabled",
    sharing_strategy="time-slicing", product_suffix="-SHARED", sharing_key="timeSlicing",
    sharing_options=MappingProxyType({"failRequestsGreaterThanOne": True}))


@pytest.fixture
def fair_share_mode(monkeypatch):
    """``fairshare`` registered for this test only."""
    monkeypatch.setattr(sharing, "MODES", dict(sharing.MODES))
    return sharing.register(FAIR_SHARE)


@pytest.fixture
def fair_spec(example_spec):
    """The example spec with its T4 pool shared three ways by ``fairshare``."""
    example_spec["pools"][0]["sharing"] = {"mode": "fairshare", "replicas": 3}
    return example_spec


def test_a_made_up_mode_is_parsed_and_shapes_the_pool(fair_share_mode, fair_spec):
    pool = parse_platform(fair_spec).pool("t4dev")
    assert pool.sharing.mode is fair_share_mode
    assert (pool.resource_name, pool.units_per_node, pool.device_plugin_config) == (
        "nvidia.com/gpu", 3, "fairshare-3")


def test_a_made_up_mode_renders_a_pod(fair_share_mode, fair_spec, tmp_path):
    spec = tmp_path / "platform.yaml"
    spec.write_text(yaml.safe_dump(fair_spec))
    pod = asyncio.run(render_pod(str(spec), "alice", ["data-science"], "t4-shared"))
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["JUPYTERHUB_GPU_SHARING"] == "fairshare"


def test_a_made_up_mode_renders_the_form_and_the_queue_message(fair_share_mode, fair_spec):
    platform = parse_platform(fair_spec)
    page = render_form(platform, frozenset({"data-science"}), None)
    assert "fair share (1 of 3)" in page
    grant = authorize(platform, UserRef("alice", frozenset({"data-science"})),
                      {"profile": "t4-shared"})
    assert wanted(grant).what == "a T4 fair share"
    settings = spawn_settings(platform, grant, "alice")
    assert settings.environment["JUPYTERHUB_GPU_SHARING"] == "fairshare"


def test_a_made_up_mode_renders_a_device_plugin_config_that_advertises_its_resource(
        fair_share_mode, fair_spec):
    platform = parse_platform(fair_spec)
    pool = platform.pool("t4dev")
    configs = config_map(platform)["data"]
    assert yaml.safe_load(configs["fairshare-3"]) == {
        "version": "v1", "flags": {"migStrategy": "none"},
        "sharing": {"timeSlicing": {"renameByDefault": False,
                                    "resources": [{"name": "nvidia.com/gpu", "replicas": 3}],
                                    "failRequestsGreaterThanOne": True}}}
    assert pool_labels(pool)["nvidia.com/device-plugin.config"] == "fairshare-3"
    assert node_labels(pool)["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert node_labels(pool)["nvidia.com/gpu.replicas"] == "3"
    # check-bundle reads the config as the device plugin would: same resource
    docs = [config_map(platform)]
    assert check_device_plugin(platform, "device-plugin.yaml", docs) == []


def test_a_made_up_mode_gets_the_rules_and_the_docs_of_its_kind(fair_share_mode, fair_spec):
    fair_spec["profiles"][0]["gpus"] = 2
    with pytest.raises(SpecError) as e:
        parse_platform(fair_spec)
    assert ("profile 't4-shared': gpus: 2 shares of pool 't4dev' (fairshare) cannot be "
            "requested") in str(e.value)
    fair_spec["pools"][0]["sharing"] = {"mode": "fairshare"}
    with pytest.raises(SpecError, match="replicas: is required for mode fairshare"):
        parse_platform(fair_spec)
    docs = spec_reference()
    assert "| `fairshare` | time-slicing with an equal turn" in docs
    assert "modes mps, timeslicing and fairshare only" in docs


def test_a_mode_whose_nodes_lack_nvidia_com_gpu_is_refused_on_the_cluster_autoscaler(
        monkeypatch, fair_spec):
    """A mode that renames the shared GPU (``renameByDefault``) or runs the mixed MIG
    strategy leaves its nodes without ``nvidia.com/gpu``. AKS labels every GPU node
    ``kubernetes.azure.com/accelerator``; kubernetes/autoscaler's
    ``GpuCustomResourcesProcessor.FilterOutNodesWithUnreadyResources``
    (cluster-autoscaler/processors/customresources/gpu_processor.go) counts such a node
    unready, and ``ClusterStateRegistry.IsClusterHealthy``
    (cluster-autoscaler/clusterstate/clusterstate.go) stops all scaling once more than
    ``OkTotalUnreadyCount`` nodes and ``MaxTotalUnreadyPercentage`` of all are unready
    (AKS: 3 and 45%). ``validate`` refuses such a pool on the cluster autoscaler."""
    monkeypatch.setattr(sharing, "MODES", dict(sharing.MODES))
    sharing.register(SharingMode(
        name="fairshare", summary="time-slicing, renamed", parameter=Parameter.REPLICAS,
        shared=True, resource=GPU_RESOURCE + SHARED_SUFFIX, unit="fair share",
        unit_phrase="fair share", form_words="fair share (1 of {replicas})",
        plugin_config="fairshare-{replicas}", mig_strategy="none", mig_layout="all-disabled",
        sharing_strategy="time-slicing", sharing_key="timeSlicing"))
    sharing.register(SharingMode(
        name="migmixed", summary="MIG, mixed strategy", parameter=Parameter.MIG_PROFILE,
        shared=False, resource=MIG_RESOURCE_PREFIX + "{mig_profile}", unit="MIG slice",
        unit_phrase="MIG {mig_profile} slice", form_words="MIG slice {mig_profile}",
        plugin_config="mig-mixed", mig_strategy="mixed", mig_layout="all-{mig_profile}",
        sharing_strategy="none"))
    fair_spec["pools"][1]["sharing"] = {"mode": "migmixed", "migProfile": "3g.40gb"}
    with pytest.raises(SpecError) as e:
        parse_platform(fair_spec)
    message = str(e.value)
    assert ("pool 't4dev': sharing: mode fairshare: its nodes would advertise "
            "nvidia.com/gpu.shared, not nvidia.com/gpu, and the cluster autoscaler counts "
            "a GPU node (AKS labels it kubernetes.azure.com/accelerator) without "
            "allocatable nvidia.com/gpu as unready") in message
    assert "past 3 unready nodes and 45% of the cluster it stops all scale-up" in message
    assert ("pool 'a100mig': sharing: mode migmixed: its nodes would advertise "
            "nvidia.com/mig-3g.40gb (the device plugin's MIG strategy mixed), not "
            "nvidia.com/gpu") in message
    # the built-in modes all advertise nvidia.com/gpu: the example spec is valid
    assert all(m.advertises_gpu_resource for m in sharing.MODES.values()
               if m.gpu and m.name not in ("fairshare", "migmixed"))


def test_node_auto_provisioning_follows_the_record(fair_share_mode, fair_spec, monkeypatch):
    """A made-up shared mode is refused on Node Auto Provisioning by its record alone;
    a made-up whole-GPU mode (the VM's nvidia.com/gpu, no parameter) is taken, and the
    reference names it among the modes NAP scales."""
    fair_spec["pools"][0]["autoscaler"] = "node-auto-provisioning"
    with pytest.raises(SpecError, match="pool 't4dev': autoscaler: node-auto-provisioning "
                                        "cannot scale a fairshare pool"):
        parse_platform(fair_spec)
    whole = sharing.register(SharingMode(
        name="wholegpu", summary="whole GPUs, by another name", parameter=None, shared=False,
        resource=GPU_RESOURCE, unit="GPU", unit_phrase="GPU", form_words="whole GPU",
        plugin_config="default", mig_strategy="none", mig_layout="all-disabled",
        sharing_strategy="none"))
    assert whole.vm_resource and not fair_share_mode.vm_resource
    fair_spec["pools"][0]["sharing"] = {"mode": "wholegpu"}
    fair_spec["profiles"] = [p for p in fair_spec["profiles"] if p.get("pool") != "t4dev"]
    for team in fair_spec["teams"]:
        team["quota"].pop("t4dev", None)
    assert parse_platform(fair_spec).pool("t4dev").node_auto_provisioning
    assert "for modes exclusive and wholegpu pools or CPU-only ones" in spec_reference()


def test_registration_does_not_leak(fair_spec):
    """Without the fixture (as in every other test) the made-up mode does not exist."""
    assert "fairshare" not in sharing.MODES
    with pytest.raises(SpecError, match="unknown sharing mode 'fairshare'; valid: "
                                        "exclusive, mig, mps, timeslicing"):
        parse_platform(fair_spec)


def test_a_broken_record_fails_when_it_is_registered(monkeypatch):
    monkeypatch.setattr(sharing, "MODES", dict(sharing.MODES))
    with pytest.raises(ValueError, match="'fairshare': form_words: 'fair share of "
                                         "{replica}' uses 'replica'"):
        sharing.register(SharingMode(**{**vars(FAIR_SHARE),
                                        "form_words": "fair share of {replica}"}))
    with pytest.raises(ValueError, match="'mig' is already registered"):
        sharing.register(SharingMode(**{**vars(sharing.MIG)}))


def test_a_record_without_every_field_cannot_be_made():
    fields = {k: v for k, v in vars(FAIR_SHARE).items() if k != "form_words"}
    with pytest.raises(TypeError, match="form_words"):
        SharingMode(**fields)
