"""Authorization, and golden tests of the pod settings that are a contract: the labels
Kueue reads, the environment the notebook and the culler read, the checkpoint volume
and the stop hook. (That the pod's resources, selector and tolerations fit the pool is
tested as a property in test_fit.py.)"""

from __future__ import annotations

import copy
from dataclasses import asdict, replace

import pytest

from jupyterhub_gpu.spec.images import package_version
from jupyterhub_gpu.builders.pod import SpawnSettings, merge_traits, spawn_settings
from jupyterhub_gpu.spec.grant import OptionsRejected, UserRef, authorize
from jupyterhub_gpu.checkpoint import PRESTOP_COMMAND
from tests import z2jh_chart

VERSION = package_version()  # the image tag: pyproject.toml's version, installed

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                  "effect": "NoSchedule"}
SPOT_TOLERATION = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal",
                   "value": "spot", "effect": "NoSchedule"}
IMAGE = f"jupyterhubgpu.azurecr.io/jupyterhub-gpu-notebook:{VERSION}"  # config/notebook.Dockerfile
PRESTOP = {"preStop": {"exec": {"command": list(PRESTOP_COMMAND)}}}


CONTRACT = ("namespace", "extra_labels", "environment", "volumes", "volume_mounts",
            "extra_pod_config", "lifecycle_hooks")


def _settings(platform, groups, profile):
    grant = authorize(platform, UserRef("alice", frozenset(groups)), {"profile": profile})
    settings = asdict(spawn_settings(platform, grant, "alice"))
    return {name: settings[name] for name in CONTRACT}


def test_spot_profile_with_checkpoints(platform):
    assert _settings(platform, {"ml-eng"}, "a100-spot") == {
        "namespace": "jhub-ml-eng",
        "extra_labels": {
            "kueue.x-k8s.io/queue-name": "ml-eng",
            "kueue.x-k8s.io/priority-class": "preemptible",
            "jupyterhub-gpu/profile": "a100-spot",
            "jupyterhub-gpu/team": "ml-eng",
        },
        "environment": {
            "JUPYTERHUB_GPU_PROFILE": "a100-spot",
            "JUPYTERHUB_GPU_POOL": "a100spot",
            "JUPYTERHUB_GPU_PROFILE_NAME": "A100 80GB whole GPU (spot, preemptible)",
            "JUPYTERHUB_GPU_MODEL": "A100-80GB",
            "JUPYTERHUB_GPU_SHARING": "exclusive",
            "JUPYTERHUB_GPU_UNIT": "whole GPU",
            "JUPYTERHUB_GPU_COUNT": "1",
            "JUPYTERHUB_GPU_MEMORY": "80GB",
            "JUPYTERHUB_GPU_PREEMPTIBLE": "true",
            "JUPYTERHUB_GPU_TEAM": "ml-eng",
            "JUPYTERHUB_GPU_NAMESPACE": "jhub-ml-eng",
            "JUPYTERHUB_GPU_IDLE_TIMEOUT": "1800",
            "JUPYTERHUB_GPU_MAX_AGE": "28800",
            "JUPYTERHUB_GPU_GRACE_SECONDS": "25",
            "CHECKPOINT_DIR": "/home/jovyan/checkpoints",
        },
        "volumes": [{"name": "checkpoints",
                     "persistentVolumeClaim": {"claimName": "jupyterhub-gpu-checkpoints"}}],
        "volume_mounts": [{"name": "checkpoints", "mountPath": "/home/jovyan/checkpoints",
                           "subPath": "alice"}],
        "extra_pod_config": {"terminationGracePeriodSeconds": 25},
        "lifecycle_hooks": PRESTOP,
    }


def test_time_sliced_profile(platform):
    assert _settings(platform, {"experimentation"}, "t4-shared") == {
        "namespace": "jhub-experimentation",
        "extra_labels": {
            "kueue.x-k8s.io/queue-name": "experimentation",
            "kueue.x-k8s.io/priority-class": "interactive",
            "jupyterhub-gpu/profile": "t4-shared",
            "jupyterhub-gpu/team": "experimentation",
        },
        "environment": {
            "JUPYTERHUB_GPU_PROFILE": "t4-shared",
            "JUPYTERHUB_GPU_POOL": "t4dev",
            "JUPYTERHUB_GPU_PROFILE_NAME": "T4 shared (dev)",
            "JUPYTERHUB_GPU_MODEL": "T4",
            "JUPYTERHUB_GPU_SHARING": "timeslicing",
            "JUPYTERHUB_GPU_UNIT": "time-sliced share (1 of 4)",
            "JUPYTERHUB_GPU_COUNT": "1",
            "JUPYTERHUB_GPU_MEMORY": "16GB",
            "JUPYTERHUB_GPU_PREEMPTIBLE": "false",
            "JUPYTERHUB_GPU_TEAM": "experimentation",
            "JUPYTERHUB_GPU_NAMESPACE": "jhub-experimentation",
            "JUPYTERHUB_GPU_IDLE_TIMEOUT": "1800",
        },
        "volumes": [],
        "volume_mounts": [],
        "extra_pod_config": {},
        "lifecycle_hooks": PRESTOP,
    }


def test_mig_profile_memory(platform):
    settings = _settings(platform, {"data-science"}, "a100-mig-3g")
    assert settings["environment"]["JUPYTERHUB_GPU_MEMORY"] == "40GB"
    assert settings["environment"]["JUPYTERHUB_GPU_SHARING"] == "mig"


def test_empty_options_give_the_default_profile(platform):
    grant = authorize(platform, UserRef("bob", frozenset({"data-science"})), {})
    assert grant.profile.slug == "t4-shared"


def test_first_team_in_spec_order_wins(platform):
    grant = authorize(platform, UserRef("carol", frozenset({"experimentation", "ml-eng"})),
                      {"profile": "a100-spot"})
    assert (grant.team.name, grant.team.local_queue) == ("ml-eng", "ml-eng")


REJECTIONS = [
    ({"data-science"}, {"profile": "h100-huge"},
     "The profile 'h100-huge' does not exist. Choose one of: cpu, t4-shared, a100-mig-3g.",
     "requested unknown profile 'h100-huge'"),
    ({"data-science"}, {"profile": "a100-training"},
     "The profile 'a100-training' is not available to you. Choose one of: cpu, t4-shared, "
     "a100-mig-3g.", "requested forbidden profile 'a100-training'"),
    ({"data-science"}, {"profile": "t4-shared", "image": "evil/miner"},
     "Unexpected server options: image. Choose a profile on the form.",
     "rejected fields not offered by any profile: ['image']"),
    ({"marketing"}, {"profile": "t4-shared"},
     "Your account is not in any team that may use GPUs. Ask your JupyterHub admin.",
     "in no team of the platform spec"),
    ({"data-science"}, ["t4-shared"], "Invalid server options.", "options are not a mapping"),
    ({"data-science"}, {"profile": ["t4-shared"]},
     "The profile ['t4-shared'] does not exist. Choose one of: cpu, t4-shared, a100-mig-3g.",
     "requested unknown profile ['t4-shared']"),
]


@pytest.mark.parametrize("groups,options,message,detail", REJECTIONS)
def test_rejections_name_the_problem(platform, groups, options, message, detail):
    with pytest.raises(OptionsRejected) as info:
        authorize(platform, UserRef("mallory", frozenset(groups)), options)
    assert str(info.value) == message
    assert info.value.log_detail.endswith(detail)
    assert info.value.log_detail.startswith("user 'mallory' (groups: ")


def test_merge_traits_merges_dicts_appends_lists_replaces_scalars(platform):
    grant = authorize(platform, UserRef("alice", frozenset({"ml-eng"})), {"profile": "a100-spot"})
    settings = spawn_settings(platform, grant, "alice")
    base = {"image": "admin/image", "node_selector": {"team": "x",
            "kubernetes.azure.com/agentpool": "cpu"},
            "tolerations": [{"key": "admin", "operator": "Exists"}],
            "environment": {"ADMIN": "1", "JUPYTERHUB_GPU_TEAM": "stale"}}
    before = copy.deepcopy(base)
    merged = merge_traits(base, settings)
    assert base == before, "merge must not mutate its inputs"
    assert merged["image"] == IMAGE
    assert merged["node_selector"] == {"team": "x", "kubernetes.azure.com/agentpool": "a100spot"}
    assert merged["tolerations"] == [{"key": "admin", "operator": "Exists"},
                                     GPU_TOLERATION, SPOT_TOLERATION]
    assert merged["environment"]["ADMIN"] == "1"
    assert merged["environment"]["JUPYTERHUB_GPU_TEAM"] == "ml-eng"
    assert set(merged) == set(SpawnSettings.trait_names())
    merged["tolerations"].append("x")
    assert len(settings.tolerations) == 2, "the result shares no containers with its inputs"


def _only(settings: SpawnSettings, **traits) -> SpawnSettings:
    """``settings`` with the given traits replaced (to test one shape at a time)."""
    return replace(settings, **traits)


@pytest.fixture
def spot_settings(platform):
    grant = authorize(platform, UserRef("alice", frozenset({"ml-eng"})), {"profile": "a100-spot"})
    return spawn_settings(platform, grant, "alice")


def test_dicts_merge_recursively_like_kubespawner_override(spot_settings):
    base = {"extra_pod_config": {"securityContext": {"runAsUser": 1000, "fsGroup": 100},
                                 "enableServiceLinks": False, "hostIPC": False}}
    settings = _only(spot_settings, extra_pod_config={
        "securityContext": {"fsGroup": 0}, "hostIPC": None, "priority": 5})
    assert merge_traits(base, settings)["extra_pod_config"] == {
        "securityContext": {"runAsUser": 1000, "fsGroup": 0},  # nested: key by key
        "enableServiceLinks": False,
        "priority": 5,  # and hostIPC removed by the profile's None
    }


def test_admin_dict_and_profile_list_keep_every_admin_entry(spot_settings):
    home = {"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}}
    data = {"name": "data", "emptyDir": {}}
    base = {"volumes": {"home": home, "jupyterhub-gpu": data}}
    merged = merge_traits(base, spot_settings)["volumes"]
    (checkpoints,) = spot_settings.volumes
    assert merged == {"home": home, "jupyterhub-gpu": data,
                      "jupyterhub-gpu/0-checkpoints": checkpoints}


def test_profile_items_keep_their_order_and_unnamed_items_get_an_index(spot_settings):
    items = [{"key": f"t{i}", "operator": "Exists"} for i in range(11)]
    merged = merge_traits({"tolerations": {"a": {"key": "admin"}}},
                          _only(spot_settings, tolerations=items))["tolerations"]
    assert merged["a"] == {"key": "admin"}
    assert [merged[k] for k in sorted(merged) if k != "a"] == items  # 00 .. 10
    assert "jupyterhub-gpu/00" in merged and "jupyterhub-gpu/10" in merged


def test_admin_list_and_profile_dict_append_the_values_in_key_order(spot_settings):
    base = {"volume_mounts": [{"name": "home", "mountPath": "/home/jovyan"}]}
    settings = _only(spot_settings, volume_mounts={
        "b": {"name": "b", "mountPath": "/b"}, "a": {"name": "a", "mountPath": "/a"}})
    assert merge_traits(base, settings)["volume_mounts"] == [
        {"name": "home", "mountPath": "/home/jovyan"},
        {"name": "a", "mountPath": "/a"}, {"name": "b", "mountPath": "/b"}]


def test_scalars_and_unset_admin_traits_take_the_profile_value(spot_settings):
    merged = merge_traits({"cpu_limit": 2, "namespace": "jupyterhub"}, spot_settings)
    assert merged["cpu_limit"] == 20.0 and merged["namespace"] == "jhub-ml-eng"
    assert merged["volumes"] == spot_settings.volumes  # the admin set no volumes
    settings = _only(spot_settings, node_selector={"pool": "a"})
    assert merge_traits({"node_selector": None}, settings)["node_selector"] == {"pool": "a"}


def test_a_dict_and_a_scalar_give_the_profile_value(spot_settings):
    settings = _only(spot_settings, environment={"A": "1"})
    assert merge_traits({"environment": "not-a-dict"}, settings)["environment"] == {"A": "1"}
    assert merge_traits({"image": {"odd": 1}}, spot_settings)["image"] == spot_settings.image


def _sorted_values(value):
    """How KubeSpawner puts a list-or-dict trait into the pod (values by sorted key)."""
    return [value[k] for k in sorted(value)] if isinstance(value, dict) else value


@pytest.fixture(scope="module")
def chart_base():
    """The trait values the z2jh 4.4.0 chart sets from our Helm values."""
    if not z2jh_chart.REFERENCE.is_dir():
        pytest.skip(f"z2jh reference data not found at {z2jh_chart.REFERENCE}: the "
                    f"chart's default values are needed beside the checkout")
    config = z2jh_chart.kubespawner_config(z2jh_chart.helm_values())
    return dict(config.KubeSpawner)


def _grant_for_anyone(platform, profile):
    """``profile`` granted to a user in a group that may start it."""
    group = (profile.allowed_groups or platform.teams[0].groups)[0]
    return authorize(platform, UserRef("alice", frozenset({group})), {"profile": profile.slug})


def _by_name(items):
    return sorted(items, key=lambda item: item["name"])


def test_chart_home_volume_and_tolerations_survive_every_profile(platform, chart_base):
    home = {"name": "volume-{user_server}",
            "persistentVolumeClaim": {"claimName": "{pvc_name}"}}
    home_mount = {"name": "volume-{user_server}", "mountPath": "/home/jovyan",
                  "subPath": None}
    chart_tolerations = chart_base["tolerations"]
    assert [t["key"] for t in chart_tolerations] == ["hub.jupyter.org/dedicated",
                                                     "hub.jupyter.org_dedicated"]
    assert any(p.checkpoint.enabled for p in platform.profiles)
    for profile in platform.profiles:
        settings = spawn_settings(platform, _grant_for_anyone(platform, profile), "alice")
        merged = merge_traits(chart_base, settings)
        assert _by_name(_sorted_values(merged["volumes"])) == _by_name(
            [home, *settings.volumes]), profile.slug
        assert _by_name(_sorted_values(merged["volume_mounts"])) == _by_name(
            [home_mount, *settings.volume_mounts]), profile.slug
        assert merged["tolerations"] == [*chart_tolerations, *settings.tolerations]
        assert merged["extra_labels"] == {"hub.jupyter.org/network-access-hub": "true",
                                          **settings.extra_labels}



async def test_a_notebook_pod_gets_no_kubernetes_token_whatever_the_admin_set(
        platform, example_spec_path):
    """Users submit jobs through the hub's gpu-jobs service, never with credentials of
    their own: the pod GPUSpawner creates mounts no ServiceAccount token, even where
    the admin's KubeSpawner config would mount one."""
    from jupyterhub_gpu.hub.render import render_pod

    pod = await render_pod(str(example_spec_path), "alice", ["data-science"], "t4-shared")
    assert pod["spec"]["automountServiceAccountToken"] is False
    grant = authorize(platform, UserRef("alice", frozenset({"data-science"})),
                      {"profile": "t4-shared"})
    traits = merge_traits({"automount_service_account_token": True},
                          spawn_settings(platform, grant, "alice"))
    assert traits["automount_service_account_token"] is False
