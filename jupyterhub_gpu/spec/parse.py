"""Parse the admin's GPU platform spec once into :class:`~jupyterhub_gpu.spec.model.Platform`.

Every problem is collected, each naming the pool, team, priority or profile and the
field, and all of them are raised together as one :class:`SpecError`.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

import yaml

from . import quantities as q
from . import sharing as modes
from .gpus import GPU_MODELS, NO_GPU, VM_SIZES
from .jobs import job_profile, job_profiles_on_pools
from .sharing import Parameter
from .model import Autoscaler, CheckpointStorage, GpuIdle, Monitoring, Platform, Pool, Priority, Profile, Team
from .model import DaemonsetOverhead, Sharing
from .fields import (DNS_LABEL, FIELDS, POOL_NAME, REMOVED, REQUIRED, SCHEMA, Section,
                     SpecError, field_default, list_entry, profile_fields, read_block,
                     read_bool, read_choice, read_counts, read_duration_or_zero, read_int,
                     read_items, read_name, read_names, read_number, read_str,
                     units_on_pools)
from .validate import check_platform

__all__ = ["FIELDS", "REMOVED", "SCHEMA", "SpecError", "field_default", "load_platform",
           "parse_platform", "parse_platform_text"]

#: How each parameter of a sharing mode is read, and what to add when it is missing.
_PARAMETERS: dict[Parameter, tuple[Callable[[Any], Any], str]] = {
    Parameter.MIG_PROFILE: (read_str, ""),
    Parameter.REPLICAS: (read_int(2), " (an integer >= 2)"),
}


def _sharing(errors: list[str], label: str, data: Any, gpu: Any) -> Sharing | None:
    """``pools[].sharing``: a registered mode and exactly the parameter it takes."""
    n_errors = len(errors)
    s = Section(errors, f"{label}: sharing", data, "sharing")
    mode = s.get("mode", read_choice(modes.MODES, "sharing mode"))
    values = {p: s.get(p.value, parse, None) for p, (parse, _) in _PARAMETERS.items()}
    for param, value in values.items():
        if mode is None:
            break
        if mode.parameter is param and not s.given(param.value):
            s.fail(param.value, f"is required for mode {mode}{_PARAMETERS[param][1]}")
        elif mode.parameter is not param and value is not None:
            s.fail(param.value, f"is only allowed with {modes.modes_taking(param)}, not {mode}")
    mig = values[Parameter.MIG_PROFILE]
    if mode is not None and mode.partitioned and mig and gpu and gpu.mig_profile(mig) is None:
        valid = ", ".join(p.name for p in gpu.mig) or "none (this GPU has no MIG)"
        s.fail(Parameter.MIG_PROFILE.value,
               f"mig profile {mig!r} does not exist on {gpu.name}; valid: {valid}")
    if len(errors) > n_errors:
        return None
    return Sharing(mode, mig, values[Parameter.REPLICAS] or field_default("sharing", "replicas"))


def _or_zero(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse``, but also accepting 0 (a pool without daemonsets)."""
    def parse_or_zero(v: Any) -> Any:
        return 0 if not isinstance(v, bool) and str(v).strip() in ("0", "0.0") else parse(v)
    return parse_or_zero


def _overhead(errors: list[str], label: str, data: Any) -> DaemonsetOverhead | None:
    s = Section(errors, f"{label}: daemonsetOverhead", data, "daemonsetOverhead")
    cpu = s.get("cpu", _or_zero(q.parse_cpu))
    memory = s.get("memory", _or_zero(q.parse_memory))
    return None if cpu is None or memory is None else DaemonsetOverhead(cpu, memory)



#: Fields of a pool that only a pool with a GPU may set.
GPU_POOL_FIELDS = ("gpusPerNode", "sharing")
#: Fields of a profile that only a profile on a pool with a GPU may set.
GPU_PROFILE_FIELDS = ("gpus", "gpuIdle")


def _pool_gpu(s: Section, vm: Any, gpu: Any) -> tuple[int | None, Sharing | None]:
    """``gpusPerNode`` and ``sharing``; a pool with ``gpu: none`` may set neither."""
    if gpu is NO_GPU:
        for key in GPU_POOL_FIELDS:
            if s.given(key):
                s.fail(key, f"a pool with gpu: {NO_GPU.name} has no GPU; remove {key}")
        return 0, Sharing(modes.cpu_only_mode())
    gpus = s.get("gpusPerNode", read_int(1), vm.gpus if vm is not None else REQUIRED)
    sharing = s.get("sharing", lambda data: _sharing(s.errors, s.label, data, gpu))
    if sharing is not None and not sharing.mode.gpu:
        s.fail("sharing", f"mode {sharing.mode} is for pools with gpu: {NO_GPU.name}; "
               f"choose a GPU sharing mode")
    return gpus, sharing


def _pool(errors: list[str], data: Any, index: int) -> Pool | None:
    s, n_errors = list_entry(errors, data, index, "pool")
    name = s.get("name", read_name(POOL_NAME, "an AKS pool name (a-z then a-z0-9, at most 12)"))
    vm_size = s.get("vmSize", read_str)
    vm = VM_SIZES.get(vm_size or "")
    gpu = s.get("gpu", read_choice(GPU_MODELS, "gpu model"))
    known = vm is not None
    cpus = s.get("cpusPerNode", read_int(1), vm.cpus if known else REQUIRED)
    mem = s.get("memoryPerNode", q.parse_memory, vm.memory_gib * 2**30 if known else REQUIRED)
    if known and gpu is not None and vm.gpu != gpu.name:
        carries = vm.gpu if vm.gpus else "no GPU"
        s.fail("gpu", f"{vm_size} carries {carries}, not {gpu.name}")
    gpus, sharing = _pool_gpu(s, vm, gpu)
    lo = s.get("minNodes", read_int(0))
    hi = s.get("maxNodes", read_int(1))
    if lo is not None and hi is not None and lo > hi:
        s.fail("minNodes", f"{lo} is above maxNodes {hi}")
    spot = s.get("spot", read_bool)
    price = s.get("pricePerNodeHour", read_number)
    consolidate = s.get("consolidateAfter", read_duration_or_zero)
    boot = s.get("bootTime", read_duration_or_zero)
    overhead = read_block(errors, s.label, s, "daemonsetOverhead", _overhead)
    autoscaler = s.get("autoscaler", read_choice({a.value: a for a in Autoscaler}, "autoscaler"))
    if len(errors) > n_errors:
        return None
    return Pool(name, vm_size, gpu, gpus, sharing, cpus, mem, spot, lo, hi, price,
                consolidate_after_seconds=consolidate, boot_seconds=boot,
                daemonset_overhead=overhead, autoscaler=autoscaler)


def _team(errors: list[str], data: Any, index: int) -> Team | None:
    s, n_errors = list_entry(errors, data, index, "team")
    team = Team(
        name=s.get("name", read_name(DNS_LABEL, "a DNS label (a-z, 0-9, -)")),
        groups=s.get("groups", read_names),
        namespace=s.get("namespace", read_name(DNS_LABEL, "a namespace name")),
        quota=s.get("quota", read_counts),
        cohort=s.get("cohort", read_name(DNS_LABEL, "a DNS label")),
        borrowing_limit=s.get("borrowingLimit", read_counts),
        lending_limit=s.get("lendingLimit", read_counts),
        lead_groups=s.get("leadGroups", read_names),
    )
    return team if len(errors) == n_errors else None


def _priority(errors: list[str], data: Any, index: int) -> Priority | None:
    s, n_errors = list_entry(errors, data, index, "priority")
    prio = Priority(
        name=s.get("name", read_name(DNS_LABEL, "a DNS label (a-z, 0-9, -)")),
        value=s.get("value", read_int(-(2**31))),
        description=s.get("description", read_str),
        preemptible=s.get("preemptible", read_bool),
    )
    return prio if len(errors) == n_errors else None


def _percent(v: Any) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < 100:
        raise ValueError(f"must be a percentage between 0 and 100 (exclusive), got {v!r}")
    return float(v)


def _gpu_idle(errors: list[str], label: str, data: Any) -> GpuIdle | None:
    s = Section(errors, f"{label}: gpuIdle", data, "gpuIdle")
    threshold = s.get("threshold", _percent)
    window = s.get("window", q.parse_duration)
    return None if threshold is None or window is None else GpuIdle(threshold, window)


def _profile(errors: list[str], data: Any, index: int) -> Profile | None:
    s, n_errors = list_entry(errors, data, index, "profile", key="slug")
    common = profile_fields(s)  # gpus by the pool's kind: _on_pools
    profile = Profile(
        **common,
        image=s.get("image", read_str),
        idle_timeout_seconds=s.get("idleTimeout", q.parse_duration, None),  # _on_pools
        max_age_seconds=s.get("maxAge", q.parse_duration),
        queue_patience_seconds=s.get("queuePatience", q.parse_duration),
        start_timeout_seconds=s.get("startTimeout", q.parse_duration),
        gpu_idle=read_block(errors, s.label, s, "gpuIdle", _gpu_idle),
        default=s.get("default", read_bool),
    )
    return profile if len(errors) == n_errors else None


def _on_pools(errors: list[str], platform: Platform) -> tuple[Profile, ...]:
    """The profiles with the defaults that depend on their pool's kind: on a CPU-only
    pool no GPU units (and no GPU-only field) and the spec's ``cpuIdleTimeout``."""
    resolved = []
    for profile in platform.profiles:
        cpu_only, units = units_on_pools(errors, platform, profile, "profile",
                                         {"gpus": profile.units, "gpuIdle": profile.gpu_idle})
        idle = profile.idle_timeout_seconds
        if idle is None:
            idle = (platform.cpu_idle_timeout_seconds if cpu_only
                    else field_default("profile", "idleTimeout"))
        resolved.append(dataclasses.replace(profile, units=units, idle_timeout_seconds=idle))
    return tuple(resolved)


def _ratio(v: Any) -> float:
    value = read_number(v)
    if value > 1:
        raise ValueError(f"must be a ratio from 0 to 1 (0.2 is 20%), got {v!r}")
    return value


def _monitoring(errors: list[str], data: Any) -> Monitoring:
    """``monitoring``: the thresholds of the bundle's Prometheus alerts."""
    if data is None:
        return field_default("spec", "monitoring")
    s = Section(errors, "monitoring", data, "monitoring")
    values = {"gpu_utilization_target_percent": s.get("gpuUtilizationTarget", _percent),
              "queue_wait_p95_seconds": s.get("queueWaitP95", q.parse_duration),
              "spot_eviction_rate": s.get("spotEvictionRate", _ratio),
              "pool_at_max_seconds": s.get("poolAtMaxFor", q.parse_duration),
              "idle_gpu_node_seconds": s.get("idleGpuNodeFor", q.parse_duration)}
    if any(v is None for v in values.values()):
        return field_default("spec", "monitoring")
    return Monitoring(**values)


def _storage(errors: list[str], data: Any) -> CheckpointStorage | None:
    if data is None:
        return field_default("spec", "checkpointStorage")
    s = Section(errors, "checkpointStorage", data, "checkpointStorage")
    claim = s.get("claimName", read_name(DNS_LABEL, "a PVC name"))
    mount = s.get("mountPath", read_str)
    return None if claim is None or mount is None else CheckpointStorage(claim, mount)


_OBJECT_ID = re.compile(r"^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")


def _group_ids(errors: list[str], data: Any) -> Mapping[str, str]:
    """``groupIds``: JupyterHub group name -> the Entra ID group's object ID."""
    if data is None:
        return field_default("spec", "groupIds")
    if not isinstance(data, Mapping):
        errors.append("groupIds: must be a mapping of group name to object ID")
        return MappingProxyType({})
    ids: dict[str, str] = {}
    for name, oid in data.items():
        if not isinstance(name, str) or not name.strip():
            errors.append(f"groupIds: {name!r}: a group name must be a non-empty string")
        elif not isinstance(oid, str) or not _OBJECT_ID.match(oid):
            errors.append(f"groupIds: {name}: {oid!r} is not an object ID "
                          "(like 2f1c8a3e-5b7d-4e9f-8a1b-0c2d3e4f5a6b)")
        elif oid.lower() in ids.values():
            other = next(n for n, i in ids.items() if i == oid.lower())
            errors.append(f"groupIds: {name}: object ID {oid} is also {other!r}")
        else:
            ids[name] = oid.lower()
    return MappingProxyType(ids)


def _declared(data: Mapping) -> dict[str, set[str] | None]:
    """Names the admin declared, valid or not: a reference to one is no new error.
    None for a section given but unreadable (a list that is no list, any
    ``checkpointStorage``): what it declares is unknown, so references to it are not
    checked (its own error says what is wrong)."""
    def names(key: str, field: str) -> set[str] | None:
        items = data.get(key) or []
        if not isinstance(items, list):
            return None
        return {i.get(field) for i in items
                if isinstance(i, Mapping) and isinstance(i.get(field), str)}
    group_ids = data.get("groupIds") if isinstance(data.get("groupIds"), Mapping) else {}
    return {"pools": names("pools", "name"), "priorities": names("priorities", "name"),
            "teams": names("teams", "name"), "profiles": names("profiles", "slug"),
            "groupIds": {g for g in group_ids if isinstance(g, str)},
            "checkpointStorage": None if data.get("checkpointStorage") is not None else set()}


def parse_platform(data: Any, source: str = "GPU platform spec") -> Platform:
    """Turn the YAML-loaded spec into a :class:`Platform` or raise :class:`SpecError`."""
    errors: list[str] = []
    top = Section(errors, "spec", data, "spec")
    platform = Platform(
        pools=read_items(errors, top.data, "pools", _pool),
        teams=read_items(errors, top.data, "teams", _team),
        priorities=read_items(errors, top.data, "priorities", _priority),
        profiles=read_items(errors, top.data, "profiles", _profile),
        checkpoint_storage=_storage(errors, top.data.get("checkpointStorage")),
        group_ids=_group_ids(errors, top.data.get("groupIds")),
        cpu_idle_timeout_seconds=top.get("cpuIdleTimeout", q.parse_duration),
        gpu_servers_per_user=top.get("gpuServersPerUser", read_int(0)),
        job_profiles=read_items(errors, top.data, "jobProfiles", job_profile),
        jobs_per_user=top.get("jobsPerUser", read_int(0)),
        monitoring=_monitoring(errors, top.data.get("monitoring")),
    )
    platform = dataclasses.replace(platform, profiles=_on_pools(errors, platform),
                                   job_profiles=job_profiles_on_pools(errors, platform))
    errors.extend(check_platform(platform, _declared(top.data)))
    if errors:
        raise SpecError(errors, source)
    return platform


def parse_platform_text(text: str | bytes, source: str) -> Platform:
    """Parse a spec's YAML text; ``source`` (e.g. its file) names it in the errors."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError([f"not valid YAML: {e}"], source) from e
    return parse_platform(data, source=source)


def load_platform(path: str | Path) -> Platform:
    """Read and parse a spec file (YAML)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError([f"cannot read the file: {e.strerror}"], str(path)) from e
    return parse_platform_text(text, str(path))
