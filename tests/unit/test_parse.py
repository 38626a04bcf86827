"""The spec parser: the example is valid, and every bad spec names its problem."""

from __future__ import annotations

import dataclasses
from enum import Enum
from types import MappingProxyType

import pytest

from jupyterhub_gpu.spec.parse import SpecError, load_platform, parse_platform
from jupyterhub_gpu.spec import sharing
from jupyterhub_gpu.spec.model import USER_TAINT


def test_example_spec_parses(platform):
    assert [p.name for p in platform.pools] == ["t4dev", "a100mig", "a100spot", "a100", "cpu"]
    t4, mig, spot, on_demand, cpu = platform.pools
    assert (cpu.has_gpu, cpu.resource_name, cpu.units_per_node, cpu.taints) == (
        False, "", 1, (USER_TAINT,))
    assert (t4.sharing.mode, t4.sharing.replicas, t4.units_per_node) == (
        sharing.TIMESLICING, 4, 4)
    assert (mig.sharing.mig_profile, mig.units_per_node, mig.unit_memory_gb) == ("3g.40gb", 2, 40)
    assert spot.spot and spot.cpus_per_node == 24 and spot.memory_per_node == 220 * 2**30
    assert not on_demand.spot and on_demand.resource_name == spot.resource_name
    training = platform.profile("a100-training")  # spot while there is room, else on demand
    assert (training.pool, training.pool_names, training.fallback) == (
        "a100spot", ("a100spot", "a100"), True)
    assert platform.profile("a100-spot").pool_names == ("a100spot",)
    assert platform.profile("a100-spot").checkpoint.grace_period_seconds == 25
    assert platform.profile("t4-shared").idle_timeout_seconds == 1800
    assert platform.profile("a100-mig-3g").max_age_seconds == 12 * 3600
    assert platform.profile("a100-mig-3g").queue_patience_seconds == 20 * 60
    assert platform.profile("a100-mig-3g").gpu_idle.window_seconds == 30 * 60
    assert platform.profile("t4-shared").queue_patience_seconds == 600  # the default


def test_an_unknown_pool_name_is_a_key_error_naming_the_pools(platform):
    with pytest.raises(KeyError, match="no pool named 'h100'.*its pools: .*"
                                       + platform.pools[0].name):
        platform.pool("h100")
    assert platform.pool(platform.pools[-1].name) is platform.pools[-1]


def test_autoscaling_fields_default_and_accept_zero(example_spec):
    t4 = parse_platform(example_spec).pool("t4dev")
    assert (t4.consolidate_after_seconds, t4.boot_seconds) == (600, 600)
    example_spec["pools"][0].update(consolidateAfter="0s", bootTime="1m30s")
    t4 = parse_platform(example_spec).pool("t4dev")
    assert (t4.consolidate_after_seconds, t4.boot_seconds) == (0, 90)


def test_boot_time_defaults_by_what_a_new_node_must_do(example_spec):
    """A GPU node waits for the GPU Operator's driver, a MIG node also for its reboot
    into MIG mode (spec.boot); a given bootTime wins."""
    platform = parse_platform(example_spec)
    assert {p.name: p.boot_seconds for p in platform.pools} == {
        "t4dev": 600, "a100mig": 900, "a100spot": 600, "a100": 600, "cpu": 300}
    example_spec["pools"][1]["bootTime"] = "0s"
    assert parse_platform(example_spec).pool("a100mig").boot_seconds == 0


def _mutable_parts(value, path: str = "platform") -> list[str]:
    if dataclasses.is_dataclass(value):
        own = [] if type(value).__dataclass_params__.frozen else [path]
        return own + [part for f in dataclasses.fields(value)
                      for part in _mutable_parts(getattr(value, f.name), f"{path}.{f.name}")]
    if isinstance(value, (tuple, frozenset)):
        return [part for i, v in enumerate(value) for part in _mutable_parts(v, f"{path}[{i}]")]
    if isinstance(value, MappingProxyType):
        return [part for k, v in value.items() for part in _mutable_parts(v, f"{path}[{k!r}]")]
    if isinstance(value, (str, int, float, bool, Enum)) or value is None:
        return []
    return [f"{path} ({type(value).__name__})"]


def test_the_parsed_spec_cannot_be_changed(platform):
    """One Platform is shared by every spawner and builder: nothing in it is mutable,
    so no builder can change it for the next one."""
    assert _mutable_parts(platform) == []
    assert _mutable_parts({"quota": {}}) == ["platform (dict)"]  # the check sees a dict


def _set(spec: dict, path: str, value) -> dict:
    """Set ``a.0.b`` style ``path`` in ``spec`` (``None`` deletes)."""
    *parents, last = path.split(".")
    node = spec
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    elif value is None:
        del node[last]
    else:
        node[last] = value
    return spec


BAD_SPECS = [
    ("pools.1.sharing.migProfile", "3g.20gb",
     "pool 'a100mig': sharing: migProfile: mig profile '3g.20gb' does not exist on A100-80GB;"
     " valid: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"),
    ("pools.0.sharing", {"mode": "mig", "migProfile": "1g.5gb"},
     "pool 't4dev': sharing: migProfile: mig profile '1g.5gb' does not exist on T4;"
     " valid: none (this GPU has no MIG)"),
    ("pools.0.sharing", {"mode": "timeslicing"},
     "pool 't4dev': sharing: replicas: is required for mode timeslicing (an integer >= 2)"),
    ("pools.0.sharing", {"mode": "exclusive", "replicas": 4},
     "pool 't4dev': sharing: replicas: is only allowed with modes mps and timeslicing, "
     "not exclusive"),
    ("pools.0.sharing", {"mode": "shared"},
     "pool 't4dev': sharing: mode: unknown sharing mode 'shared'; "
     "valid: exclusive, mig, mps, timeslicing, none"),
    ("pools.0.gpu", "V100",
     "pool 't4dev': gpu: unknown gpu model 'V100'; valid: none, T4, A10, A100-40GB, A100-80GB, "
     "H100-80GB, H200"),
    ("pools.0.gpu", "A10", "pool 't4dev': gpu: Standard_NC8as_T4_v3 carries T4, not A10"),
    ("pools.0.name", "T4-Dev",
     "pool 'T4-Dev': name: 'T4-Dev' is not an AKS pool name (a-z then a-z0-9, at most 12)"),
    ("pools.0.minNodes", 7, "pool 't4dev': minNodes: 7 is above maxNodes 5"),
    ("pools.0.vmSize", "Standard_NC8as_T4_v4",
     "pool 't4dev': vmSize: unknown VM size 'Standard_NC8as_T4_v4' (did you mean "
     "Standard_NC8as_T4_v3?); known: Standard_D4s_v5, Standard_D8s_v5, Standard_D16s_v5, "
     "Standard_E8s_v5, Standard_E16s_v5, Standard_NC4as_T4_v3, Standard_NC8as_T4_v3, "
     "Standard_NC16as_T4_v3, Standard_NC64as_T4_v3, Standard_NV36ads_A10_v5, "
     "Standard_NV72ads_A10_v5, Standard_NC24ads_A100_v4, Standard_NC48ads_A100_v4, "
     "Standard_NC96ads_A100_v4, Standard_ND96asr_v4, Standard_ND96amsr_A100_v4, "
     "Standard_ND96isr_H100_v5, Standard_ND96isr_H200_v5; for another size set "
     "cpusPerNode, memoryPerNode, gpusPerNode"),
    ("pools.0.pricePerNodeHour", "cheap",
     "pool 't4dev': pricePerNodeHour: must be a number >= 0, got 'cheap'"),
    ("pools.0.maxNode", 5,
     "pool 't4dev': maxNode: unknown field (did you mean maxNodes?); allowed: name, vmSize,"
     " gpu, gpusPerNode, sharing, spot, minNodes, maxNodes, pricePerNodeHour, cpusPerNode,"
     " memoryPerNode, consolidateAfter, bootTime, daemonsetOverhead, autoscaler"),
    ("pools.0.colour", "blue",
     "pool 't4dev': colour: unknown field; allowed: name, vmSize, gpu, gpusPerNode, sharing,"
     " spot, minNodes, maxNodes, pricePerNodeHour, cpusPerNode, memoryPerNode,"
     " consolidateAfter, bootTime, daemonsetOverhead, autoscaler"),
    ("pools.0.consolidateAfter", "whenever",
     "pool 't4dev': consolidateAfter: 'whenever' is not a duration; use e.g. 90s, 30m, 8h "
     "or 1h30m"),
    ("pools.0.bootTime", -1, "pool 't4dev': bootTime: -1 is not a non-negative duration"),
    ("profiles.0.gpus", 2,
     "profile 't4-shared': gpus: 2 shares of pool 't4dev' (timeslicing) cannot be requested;"
     " the device plugin fails pods that ask for more than 1 nvidia.com/gpu; use 1"),
    ("profiles.1.gpus", 3,
     "profile 'a100-mig-3g': gpus: 3 exceeds the 2 MIG slice(s) one node of pool 'a100mig' has"),
    # 8 vCPU - 180m kube-reserved - 500m daemonsets = 7320m for 4 shares
    ("profiles.0.cpu", 2,
     "profile 't4-shared' on pool 't4dev': cpu: 4 shares per node × cpu 2 = 8 > 7.32 "
     "allocatable vCPU on Standard_NC8as_T4_v3 (8 vCPU − 180m kube-reserved − 500m "
     "daemonsetOverhead); use cpu: 1830m or less"),
    # 56Gi - (20Mi * 110 pods + 50Mi) - 100Mi eviction - 1536Mi daemonsets = 53458Mi
    ("profiles.0.memory", "14Gi",
     "profile 't4-shared' on pool 't4dev': memory: 4 shares per node × memory 14Gi = 56Gi > "
     "53458Mi allocatable on Standard_NC8as_T4_v3 (56Gi − 2250Mi kube-reserved − 100Mi "
     "eviction threshold − 1536Mi daemonsetOverhead); use memory: 13364Mi or less"),
    ("pools.0.daemonsetOverhead", {"cpu": "1"},
     "profile 't4-shared' on pool 't4dev': cpu: 4 shares per node × cpu 1750m = 7 > 6.82 "
     "allocatable vCPU on Standard_NC8as_T4_v3 (8 vCPU − 180m kube-reserved − 1 "
     "daemonsetOverhead); use cpu: 1705m or less"),
    ("pools.0.daemonsetOverhead", {"cpu": "lots", "disk": "1Gi"},
     "pool 't4dev': daemonsetOverhead: cpu: 'lots' is not a CPU amount; use e.g. 2, 0.5 or "
     "500m"),
    ("profiles.0.memory", "lots",
     "profile 't4-shared': memory: 'lots' is not a memory size; use e.g. 512Mi, 12Gi or 16G"),
    ("profiles.0.pool", "h100",
     "profile 't4-shared': pool: unknown pool 'h100'; valid: a100, a100mig, a100spot, cpu, t4dev"),
    ("profiles.0.priority", "urgent",
     "profile 't4-shared': priority: unknown priority 'urgent'; "
     "valid: batch, interactive, preemptible"),
    ("profiles.0.idleTimeout", "soon",
     "profile 't4-shared': idleTimeout: 'soon' is not a duration; use e.g. 90s, 30m, 8h or 1h30m"),
    ("profiles.0.idleTimeout", 0, "profile 't4-shared': idleTimeout: 0 is not a positive duration"),
    ("profiles.0.kernelIdleTimeout", "idle", "profile 't4-shared': kernelIdleTimeout: 'idle' "
     "is not a duration; use e.g. 90s, 30m, 8h or 1h30m"),
    ("profiles.4.kernelIdleTimeout", "10m", "profile 'cpu': kernelIdleTimeout: pool 'cpu' has "
     "no GPU (gpu: none); remove kernelIdleTimeout"),
    ("gpuKernelsPerUser", -1, "spec: gpuKernelsPerUser: must be an integer >= 0, got -1"),
    ("profiles.0.queuePatience", "forever",
     "profile 't4-shared': queuePatience: 'forever' is not a duration; use e.g. 90s, 30m, 8h "
     "or 1h30m"),
    ("profiles.0.startTimeout", -5, "profile 't4-shared': startTimeout: -5 is not a positive "
     "duration"),
    ("profiles.0.gpuIdle", {"threshold": 150, "window": "30m"},
     "profile 't4-shared': gpuIdle: threshold: must be a percentage between 0 and 100 "
     "(exclusive), got 150"),
    ("profiles.0.gpuIdle", {"threshold": 5},
     "profile 't4-shared': gpuIdle: window: is required"),
    ("profiles.3.checkpoint", {"enabled": True, "gracePeriod": "2m"},
     "profile 'a100-spot': checkpoint: gracePeriod: 120s does not fit inside Azure's 30s spot "
     "eviction notice on pool 'a100spot'; use at most 30s"),
    ("profiles.1.default", True,
     "profiles: default: only one profile may be the default, got t4-shared, a100-mig-3g"),
    ("profiles.1.slug", "t4-shared", "profile 't4-shared': defined 2 times; names must be unique"),
    ("teams.0.quota", {"t4dev": 8, "h100": 2},
     "team 'data-science': quota: unknown pool 'h100'; valid: a100, a100mig, a100spot, cpu, t4dev"),
    ("teams.0.quota", {"t4dev": -1},
     "team 'data-science': quota: must map pool names to whole numbers >= 0, got {'t4dev': -1}"),
    ("teams.0.groups", "data-science",
     "team 'data-science': groups: must be a list of names, got 'data-science'"),
    ("priorities.0.value", "high",
     "priority 'interactive': value: must be an integer >= -2147483648, got 'high'"),
    ("checkpointStorage", None,
     "profile 'a100-training': checkpoint: enabled, but the spec has no checkpointStorage"),
    ("teams.2.fairShareWeight", 20,
     "team 'experimentation': fairShareWeight: no longer supported: Kueue runs classical "
     "preemption, where fair-sharing weights do nothing (see the bundle docs, Preemption); "
     "remove it"),
]


@pytest.mark.parametrize("path,value,message", BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
def test_bad_spec_names_item_and_field(example_spec, path, value, message):
    with pytest.raises(SpecError) as info:
        parse_platform(_set(example_spec, path, value))
    assert message in info.value.errors


def test_all_errors_are_reported_at_once(example_spec):
    _set(example_spec, "pools.1.sharing.migProfile", "9g.99gb")
    _set(example_spec, "profiles.0.cpu", "lots")
    _set(example_spec, "teams.2.namespace", "Not_A_Namespace")
    with pytest.raises(SpecError) as info:
        parse_platform(example_spec)
    errors = info.value.errors
    assert len(errors) == 3, errors
    assert str(info.value).startswith("GPU platform spec has 3 error(s):\n  - pool 'a100mig'")


def test_invalid_pool_does_not_cascade_into_unknown_pool_errors(example_spec):
    _set(example_spec, "pools.1.gpu", "V100")
    with pytest.raises(SpecError) as info:
        parse_platform(example_spec)
    assert info.value.errors == [
        "pool 'a100mig': gpu: unknown gpu model 'V100'; valid: none, T4, A10, A100-40GB, "
        "A100-80GB, H100-80GB, H200"]


def test_a100_40gb_mig_table_in_message(example_spec):
    pool = {"name": "a100small", "vmSize": "Standard_ND96asr_v4", "gpu": "A100-40GB",
            "sharing": {"mode": "mig", "migProfile": "3g.40gb"}}
    example_spec["pools"].append(pool)
    with pytest.raises(SpecError) as info:
        parse_platform(example_spec)
    assert info.value.errors == [
        "pool 'a100small': sharing: migProfile: mig profile '3g.40gb' does not exist on "
        "A100-40GB; valid: 1g.5gb, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"]


def test_empty_and_non_mapping_specs():
    with pytest.raises(SpecError) as info:
        parse_platform({})
    assert info.value.errors == [f"{k}: at least one is required"
                                 for k in ("pools", "teams", "priorities", "profiles")]
    with pytest.raises(SpecError) as info:
        parse_platform(["not", "a", "mapping"])
    assert info.value.errors == [
        "spec: must be a mapping of pools, teams, priorities, profiles ..., got list"]


def test_unknown_top_level_field(example_spec):
    example_spec["profile"] = []
    with pytest.raises(SpecError) as info:
        parse_platform(example_spec)
    assert info.value.errors == [
        "spec: profile: unknown field (did you mean profiles?); allowed: pools, teams, "
        "priorities, profiles, "
        "checkpointStorage, groupIds, cpuIdleTimeout, gpuServersPerUser, jobProfiles, "
        "gpuKernelsPerUser, "
        "jobsPerUser, registry, monitoring"]


def test_unreadable_and_unparsable_files(tmp_path):
    with pytest.raises(SpecError, match="cannot read the file: No such file"):
        load_platform(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools:\n  - name: x\n   vmSize: y\n")
    with pytest.raises(SpecError) as info:
        load_platform(bad)
    assert str(info.value) == (
        f"{bad} has 1 error(s):\n  - line 3, column 4: not valid YAML: expected <block end>, "
        "but found '<block mapping start>' (while parsing a block collection at line 2, "
        "column 3)")


def test_an_empty_file_is_one_error(tmp_path):
    for text in ("", "# only a comment\n"):
        empty = tmp_path / "empty.yaml"
        empty.write_text(text)
        with pytest.raises(SpecError) as info:
            load_platform(empty)
        assert info.value.errors == [
            "the file is empty (or only comments): a spec is a mapping with at least pools, "
            "teams, priorities, profiles (every field: docs/reference/spec.md)"]


def test_vm_size_outside_table_needs_explicit_sizes(example_spec):
    example_spec["pools"][0].update(vmSize="Standard_NC_Future", gpusPerNode=1,
                                    cpusPerNode=8, memoryPerNode="56Gi")
    platform = parse_platform(example_spec)
    assert platform.pool("t4dev").memory_per_node == 56 * 2**30
