"""Authorization, and golden tests of the pod settings that are a contract: the labels
Kueue reads, the environment the notebook and the culler read, the checkpoint volume
and the stop hook. (That the pod's resources, selector and tolerations fit the pool is
tested as a property in test_fit.py.)"""

from __future__ import annotations

import copy
from dataclasses import asdict

import pytest

from jupyterhub_gpu.builders.pod import (OptionsRejected, SpawnSettings, UserRef, authorize,
                                         merge_traits, spawn_settings)

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                  "effect": "NoSchedule"}
SPOT_TOLERATION = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal",
                   "value": "spot", "effect": "NoSchedule"}
IMAGE = "quay.io/jupyter/pytorch-notebook:cuda12-python-3.12"
PRESTOP = {"preStop": {"exec": {"command": ["python", "-m", "jupyterhub_gpu.checkpoint",
                                            "prestop"]}}}


CONTRACT = ("namespace", "extra_labels", "environment", "volumes", "volume_mounts",
            "extra_pod_config", "lifecycle_hooks")


def _settings(platform, groups, profile):
    grant = authorize(platform, UserRef("alice", frozenset(groups)), {"profile": profile})
    settings = asdict(spawn_settings(platform, grant))
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
            "JUPYTERHUB_GPU_MODEL": "A100-80GB",
            "JUPYTERHUB_GPU_SHARING": "exclusive",
            "JUPYTERHUB_GPU_COUNT": "1",
            "JUPYTERHUB_GPU_MEMORY": "80GB",
            "JUPYTERHUB_GPU_PREEMPTIBLE": "true",
            "JUPYTERHUB_GPU_TEAM": "ml-eng",
            "JUPYTERHUB_GPU_IDLE_TIMEOUT": "1800",
            "JUPYTERHUB_GPU_MAX_AGE": "28800",
            "JUPYTERHUB_GPU_GRACE_SECONDS": "25",
            "CHECKPOINT_DIR": "/home/jovyan/checkpoints",
        },
        "volumes": [{"name": "checkpoints",
                     "persistentVolumeClaim": {"claimName": "jupyterhub-gpu-checkpoints"}}],
        "volume_mounts": [{"name": "checkpoints", "mountPath": "/home/jovyan/checkpoints",
                           "subPath": "{username}"}],
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
            "JUPYTERHUB_GPU_MODEL": "T4",
            "JUPYTERHUB_GPU_SHARING": "timeslicing",
            "JUPYTERHUB_GPU_COUNT": "1",
            "JUPYTERHUB_GPU_MEMORY": "16GB",
            "JUPYTERHUB_GPU_PREEMPTIBLE": "false",
            "JUPYTERHUB_GPU_TEAM": "experimentation",
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
     "The profile 'h100-huge' does not exist. Choose one of: t4-shared, a100-mig-3g.",
     "requested unknown profile 'h100-huge'"),
    ({"data-science"}, {"profile": "a100-training"},
     "The profile 'a100-training' is not available to you. Choose one of: t4-shared, "
     "a100-mig-3g.", "requested forbidden profile 'a100-training'"),
    ({"data-science"}, {"profile": "t4-shared", "image": "evil/miner"},
     "Unexpected server options: image. Choose a profile on the form.",
     "rejected fields not offered by any profile: ['image']"),
    ({"marketing"}, {"profile": "t4-shared"},
     "Your account is not in any team that may use GPUs. Ask your JupyterHub admin.",
     "in no team of the platform spec"),
    ({"data-science"}, ["t4-shared"], "Invalid server options.", "options are not a mapping"),
    ({"data-science"}, {"profile": ["t4-shared"]},
     "The profile ['t4-shared'] does not exist. Choose one of: t4-shared, a100-mig-3g.",
     "requested unknown profile ['t4-shared']"),
]


@pytest.mark.parametrize("groups,options,message,detail", REJECTIONS)
def test_rejections_name_the_problem(platform, groups, options, message, detail):
    with pytest.raises(OptionsRejected) as info:
        authorize(platform, UserRef("mallory", frozenset(groups)), options)
    assert str(info.value) == message
    assert info.value.log_detail.endswith(detail)
    assert info.value.log_detail.startswith("user 'mallory' (groups: ")


def test_merge_traits_follows_kubespawner_override_rules(platform):
    grant = authorize(platform, UserRef("alice", frozenset({"ml-eng"})), {"profile": "a100-spot"})
    settings = spawn_settings(platform, grant)
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
