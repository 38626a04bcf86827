"""CPU-only pools (``gpu: none``): parsed, validated, and turned into a pod, a Kueue
flavor and a form card that hold no GPU."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.builders.pod import spawn_settings
from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.cull.policy import policy_for
from jupyterhub_gpu.hub.form import profile_card, render_form
from jupyterhub_gpu.kueue.lifecycle import wanted
from jupyterhub_gpu.spec.parse import SpecError, field_default, parse_platform
from jupyterhub_gpu.hub.render import render_pod
from jupyterhub_gpu.spec.model import USER_TAINT
from jupyterhub_gpu.spec.sharing import cpu_only_mode


def _cpu_pool(example_spec) -> dict:
    return next(p for p in example_spec["pools"] if p["name"] == "cpu")


def _cpu_profile(example_spec) -> dict:
    return next(p for p in example_spec["profiles"] if p["slug"] == "cpu")


def _errors(spec) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_platform(spec)
    return info.value.errors


def test_a_cpu_pool_is_the_registry_mode_without_a_gpu(platform):
    pool = platform.pool("cpu")
    assert pool.sharing.mode is cpu_only_mode()
    assert (pool.has_gpu, pool.gpus_per_node, pool.resource_name, pool.kind) == (
        False, 0, "", "CPU")
    assert pool.gpu_resources(3) == {} and pool.taints == (USER_TAINT,)  # no GPU taint
    assert platform.pool("t4dev").gpu_resources(1) == {"nvidia.com/gpu": "1"}
    assert platform.profile("cpu").units == 0
    assert platform.gpu_pools == tuple(p for p in platform.pools if p.name != "cpu")


@pytest.mark.parametrize("field, value", [("sharing", {"mode": "exclusive"}),
                                          ("gpusPerNode", 1)])
def test_gpu_only_pool_fields_are_refused_by_name(example_spec, field, value):
    _cpu_pool(example_spec)[field] = value
    assert _errors(example_spec) == [
        f"pool 'cpu': {field}: a pool with gpu: none has no GPU; remove {field}"]


@pytest.mark.parametrize("field, value", [("gpus", 1),
                                          ("gpuIdle", {"threshold": 5, "window": "30m"})])
def test_gpu_only_profile_fields_are_refused_by_name(example_spec, field, value):
    _cpu_profile(example_spec)[field] = value
    assert _errors(example_spec) == [
        f"profile 'cpu': {field}: pool 'cpu' has no GPU (gpu: none); remove {field}"]


def test_the_cpu_mode_is_not_for_gpu_pools_and_vm_sizes_must_agree(example_spec):
    example_spec["pools"][0]["sharing"] = {"mode": "none"}
    _cpu_pool(example_spec)["vmSize"] = "Standard_NC4as_T4_v3"
    assert _errors(example_spec) == [
        "pool 't4dev': sharing: mode none is for pools with gpu: none; choose a GPU "
        "sharing mode",
        "pool 'cpu': gpu: Standard_NC4as_T4_v3 carries T4, not none"]


def test_a_gpu_on_a_cpu_vm_size_is_named(example_spec):
    pool = _cpu_pool(example_spec)
    pool.update(gpu="T4", sharing={"mode": "exclusive"})
    assert "pool 'cpu': gpu: Standard_D8s_v5 carries no GPU, not T4" in _errors(example_spec)


def test_cpu_profiles_get_the_longer_cpu_idle_timeout(example_spec):
    platform = parse_platform(example_spec)
    assert platform.profile("cpu").idle_timeout_seconds == 4 * 3600 == \
        field_default("spec", "cpuIdleTimeout")
    assert policy_for(platform, "cpu", 600).idle_timeout_seconds == 4 * 3600
    example_spec["cpuIdleTimeout"] = "8h"
    example_spec["profiles"][0].pop("idleTimeout")  # a GPU profile keeps its own default
    platform = parse_platform(example_spec)
    assert platform.profile("cpu").idle_timeout_seconds == 8 * 3600
    assert platform.profile("t4-shared").idle_timeout_seconds == \
        field_default("profile", "idleTimeout") == 1800
    _cpu_profile(example_spec)["idleTimeout"] = "1h"
    assert parse_platform(example_spec).profile("cpu").idle_timeout_seconds == 3600


def test_a_cpu_profile_must_fit_one_node(example_spec):
    _cpu_profile(example_spec)["cpu"] = 8  # a D8s_v5 leaves 7.32 vCPU for notebooks
    (error,) = _errors(example_spec)
    assert error.startswith("profile 'cpu' on pool 'cpu': cpu: 1 node per node × cpu 8 = 8 "
                            "> 7.32 allocatable vCPU on Standard_D8s_v5")


async def test_the_cpu_pod_asks_for_no_gpu_and_tolerates_no_gpu_taint(example_spec_path):
    pod = await render_pod(str(example_spec_path), "alice", ["data-science"], "cpu")
    (container,) = pod["spec"]["containers"]
    for kind in ("requests", "limits"):
        assert not [r for r in container["resources"][kind] if r.startswith("nvidia.com/")]
    assert not [t for t in pod["spec"].get("tolerations") or []
                if t.get("key", "").startswith("nvidia.com/")]
    assert pod["spec"]["nodeSelector"] == {"kubernetes.azure.com/agentpool": "cpu"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["JUPYTERHUB_GPU_COUNT"] == "0"
    assert env["JUPYTERHUB_GPU_PROFILE"] == "cpu"


def test_the_form_lists_cpu_profiles_first_without_gpu_facts(platform):
    groups = frozenset({"data-science"})
    assert [p.slug for p in platform.profiles_for(groups)] == ["cpu", "t4-shared",
                                                               "a100-mig-3g"]
    card = profile_card(platform, platform.profile("cpu"))
    assert (card.gpu, card.sharing, card.cpu, card.memory) == (False, "CPU only", "2", "8Gi")
    # 8Gi of the 28.2Gi a node leaves for notebooks (more than 2 of 7.32 vCPU) of a
    # $0.384 node-hour
    assert card.price_per_hour == "$0.11"
    form = render_form(platform, groups, None)
    assert form.index('value="cpu"') < form.index('value="t4-shared"')
    assert "GPU memory" not in form.split('value="t4-shared"')[0]
    assert 'value="t4-shared"\n           checked' in form  # the default stays the default


def test_the_queue_words_for_a_cpu_server(platform):
    grant = authorize(platform, UserRef("alice", frozenset({"data-science"})),
                      {"profile": "cpu"})
    w = wanted(grant)
    assert (w.what, w.gpu, w.pool) == ("a CPU server", "CPU", "cpu")
    settings = spawn_settings(platform, grant, "alice")
    # no GPU toleration; the CPU pool's user taint, which z2jh's user pods tolerate too
    assert settings.extra_resource_limits == {} and settings.tolerations == [
        USER_TAINT.toleration()]
