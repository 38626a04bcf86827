"""Parse the admin's GPU platform spec once into :class:`~jupyterhub_gpu.spec.Platform`.

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
from .sharing import Parameter
from .spec import (REQUIRED, Autoscaler, Checkpoint, CheckpointStorage, DaemonsetOverhead,
                   GpuIdle, Platform, Pool, Priority, Profile, Sharing, Team, default_of)
from .validate import check_platform

_FIELD_DEFAULT = object()
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_POOL_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
SCHEMA: dict[str, tuple[type, dict[str, str]]] = {
    "spec": (Platform, {"pools": "pools", "teams": "teams", "priorities": "priorities",
                        "profiles": "profiles", "checkpointStorage": "checkpoint_storage",
                        "groupIds": "group_ids",
                        "cpuIdleTimeout": "cpu_idle_timeout_seconds",
                        "gpuServersPerUser": "gpu_servers_per_user"}),
    "pool": (Pool, {"name": "name", "vmSize": "vm_size", "gpu": "gpu",
                    "gpusPerNode": "gpus_per_node", "sharing": "sharing", "spot": "spot",
                    "minNodes": "min_nodes", "maxNodes": "max_nodes",
                    "pricePerNodeHour": "price_per_node_hour", "cpusPerNode": "cpus_per_node",
                    "memoryPerNode": "memory_per_node",
                    "consolidateAfter": "consolidate_after_seconds",
                    "bootTime": "boot_seconds",
                    "daemonsetOverhead": "daemonset_overhead",
                    "autoscaler": "autoscaler"}),
    "sharing": (Sharing, {"mode": "mode", "migProfile": "mig_profile", "replicas": "replicas"}),
    "daemonsetOverhead": (DaemonsetOverhead, {"cpu": "cpu", "memory": "memory_bytes"}),
    "team": (Team, {"name": "name", "groups": "groups", "namespace": "namespace",
                    "quota": "quota", "cohort": "cohort", "borrowingLimit": "borrowing_limit",
                    "lendingLimit": "lending_limit"}),
    "priority": (Priority, {"name": "name", "value": "value", "description": "description",
                            "preemptible": "preemptible"}),
    "profile": (Profile, {"slug": "slug", "displayName": "display_name",
                          "description": "description", "pool": "pool", "pools": "pools",
                          "gpus": "units",
                          "cpu": "cpu", "memory": "memory_bytes", "image": "image",
                          "priority": "priority", "idleTimeout": "idle_timeout_seconds",
                          "maxAge": "max_age_seconds",
                          "queuePatience": "queue_patience_seconds",
                          "startTimeout": "start_timeout_seconds", "gpuIdle": "gpu_idle",
                          "allowedGroups": "allowed_groups", "checkpoint": "checkpoint",
                          "default": "default"}),
    "checkpoint": (Checkpoint, {"enabled": "enabled", "gracePeriod": "grace_period_seconds"}),
    "gpuIdle": (GpuIdle, {"threshold": "threshold_percent", "window": "window_seconds"}),
    "checkpointStorage": (CheckpointStorage, {"claimName": "claim_name",
                                              "mountPath": "mount_path"}),
}
"""Each section of the spec: the dataclass it fills, and its fields (in the order the
docs list them) with the dataclass field each one sets. A field's default is that
dataclass field's default (:func:`field_default`)."""
FIELDS: dict[str, tuple[str, ...]] = {name: tuple(keys) for name, (_, keys) in SCHEMA.items()}
"""The fields each section of the spec accepts, in order (the docs list them)."""
REMOVED: dict[str, dict[str, str]] = {
    "team": {"fairShareWeight": "no longer supported: Kueue runs classical preemption, "
             "where fair-sharing weights do nothing (see the bundle docs, Preemption); "
             "remove it"},
}
"""Fields the spec once accepted, with why they are refused (by section)."""


def field_default(section: str, key: str) -> Any:
    """The default of field ``key`` of ``section``: its dataclass field's
    (:data:`~jupyterhub_gpu.spec.REQUIRED` when it has none)."""
    cls, keys = SCHEMA[section]
    return default_of(cls, keys[key])


class SpecError(ValueError):
    """The spec is invalid; ``errors`` lists every problem found."""

    def __init__(self, errors: list[str], source: str = "GPU platform spec"):
        self.errors = list(errors)
        lines = "\n".join(f"  - {e}" for e in self.errors)
        super().__init__(f"{source} has {len(self.errors)} error(s):\n{lines}")


class _Section:
    """Typed reads of one mapping; problems go to ``errors`` prefixed by ``label``."""

    def __init__(self, errors: list[str], label: str, data: Any, section: str):
        self.errors, self.label, self.section = errors, label, section
        self.data: Mapping = data if isinstance(data, Mapping) else {}
        if not isinstance(data, Mapping):
            self.fail(None, f"must be a mapping, got {type(data).__name__}")
        allowed, removed = FIELDS[section], REMOVED.get(section, {})
        for key in sorted(set(self.data) - set(allowed), key=str):
            self.fail(key, removed.get(key) or f"unknown field; allowed: {', '.join(allowed)}")

    def fail(self, key: str | None, message: str) -> None:
        self.errors.append(f"{self.label}: {key}: {message}" if key else f"{self.label}: {message}")

    def given(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, parse: Callable[[Any], Any], default: Any = _FIELD_DEFAULT) -> Any:
        """``key`` parsed; when absent, ``default``, by default the field's own
        (:func:`field_default`); a required field that is absent is an error."""
        if default is _FIELD_DEFAULT:
            default = field_default(self.section, key)
        if not self.given(key):
            if default is REQUIRED:
                self.fail(key, "is required")
            return None if default is REQUIRED else default
        try:
            return parse(self.data[key])
        except (ValueError, TypeError) as e:
            self.fail(key, str(e))
            return None


def _str(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"must be a non-empty string, got {v!r}")
    return v


def _int(minimum: int) -> Callable[[Any], int]:
    def parse(v: Any) -> int:
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise ValueError(f"must be an integer >= {minimum}, got {v!r}")
        return v
    return parse


def _number(v: Any) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
        raise ValueError(f"must be a number >= 0, got {v!r}")
    return float(v)


def _duration_or_zero(v: Any) -> int:
    return q.parse_duration(v, allow_zero=True)


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"must be true or false, got {v!r}")
    return v


def _name(pattern: re.Pattern, what: str) -> Callable[[Any], str]:
    def parse(v: Any) -> str:
        if not isinstance(v, str) or not pattern.match(v):
            raise ValueError(f"{v!r} is not {what}")
        return v
    return parse


def _str_list(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise ValueError(f"must be a list of names, got {v!r}")
    return tuple(v)


def _choice(options: Mapping[str, Any], what: str) -> Callable[[Any], Any]:
    def parse(v: Any) -> Any:
        if v not in options:
            raise ValueError(f"unknown {what} {v!r}; valid: {', '.join(options)}")
        return options[v]
    return parse


def _counts(v: Any) -> Mapping[str, int]:
    if not isinstance(v, Mapping) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in v.values()
    ):
        raise ValueError(f"must map pool names to whole numbers >= 0, got {v!r}")
    return MappingProxyType(dict(v))


#: How each parameter of a sharing mode is read, and what to add when it is missing.
_PARAMETERS: dict[Parameter, tuple[Callable[[Any], Any], str]] = {
    Parameter.MIG_PROFILE: (_str, ""),
    Parameter.REPLICAS: (_int(2), " (an integer >= 2)"),
}


def _sharing(errors: list[str], label: str, data: Any, gpu: Any) -> Sharing | None:
    """``pools[].sharing``: a registered mode and exactly the parameter it takes."""
    n_errors = len(errors)
    s = _Section(errors, f"{label}: sharing", data, "sharing")
    mode = s.get("mode", _choice(modes.MODES, "sharing mode"))
    values = {p: s.get(p.value, parse, None) for p, (parse, _) in _PARAMETERS.items()}
    for param, value in values.items():
        if mode is None:
            break
        if mode.parameter is param and value is None:
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
    s = _Section(errors, f"{label}: daemonsetOverhead", data, "daemonsetOverhead")
    cpu = s.get("cpu", _or_zero(q.parse_cpu))
    memory = s.get("memory", _or_zero(q.parse_memory))
    return None if cpu is None or memory is None else DaemonsetOverhead(cpu, memory)


def _block(errors: list[str], label: str, s: _Section, key: str, parse: Callable) -> Any:
    """The sub-mapping ``key`` of ``s`` parsed by ``parse``, else the field's default."""
    if not s.given(key):
        return field_default(s.section, key)
    return parse(errors, label, s.data[key])


def _entry(errors: list[str], data: Any, index: int, section: str,
           key: str = "name") -> tuple[_Section, int]:
    """One item of a list (``pools[3]``), labelled by its ``key`` once it has one, and
    the count of errors before it."""
    name = data.get(key) if isinstance(data, Mapping) else None
    label = f"{section} {name!r}" if isinstance(name, str) else f"{_PLURAL[section]}[{index}]"
    n_errors = len(errors)
    return _Section(errors, label, data, section), n_errors


_PLURAL = {"pool": "pools", "team": "teams", "priority": "priorities", "profile": "profiles"}


#: Fields of a pool that only a pool with a GPU may set.
GPU_POOL_FIELDS = ("gpusPerNode", "sharing")
#: Fields of a profile that only a profile on a pool with a GPU may set.
GPU_PROFILE_FIELDS = ("gpus", "gpuIdle")


def _pool_gpu(s: _Section, vm: Any, gpu: Any) -> tuple[int | None, Sharing | None]:
    """``gpusPerNode`` and ``sharing``; a pool with ``gpu: none`` may set neither."""
    if gpu is NO_GPU:
        for key in GPU_POOL_FIELDS:
            if s.given(key):
                s.fail(key, f"a pool with gpu: {NO_GPU.name} has no GPU; remove {key}")
        return 0, Sharing(modes.cpu_only_mode())
    gpus = s.get("gpusPerNode", _int(1), vm.gpus if vm is not None else REQUIRED)
    sharing = _sharing(s.errors, s.label, s.data.get("sharing"), gpu)
    if sharing is not None and not sharing.mode.gpu:
        s.fail("sharing", f"mode {sharing.mode} is for pools with gpu: {NO_GPU.name}; "
               f"choose a GPU sharing mode")
    return gpus, sharing


def _pool(errors: list[str], data: Any, index: int) -> Pool | None:
    s, n_errors = _entry(errors, data, index, "pool")
    name = s.get("name", _name(_POOL_NAME, "an AKS pool name (a-z then a-z0-9, at most 12)"))
    vm_size = s.get("vmSize", _str)
    vm = VM_SIZES.get(vm_size or "")
    gpu = s.get("gpu", _choice(GPU_MODELS, "gpu model"))
    known = vm is not None
    cpus = s.get("cpusPerNode", _int(1), vm.cpus if known else REQUIRED)
    mem = s.get("memoryPerNode", q.parse_memory, vm.memory_gib * 2**30 if known else REQUIRED)
    if known and gpu is not None and vm.gpu != gpu.name:
        carries = vm.gpu if vm.gpus else "no GPU"
        s.fail("gpu", f"{vm_size} carries {carries}, not {gpu.name}")
    gpus, sharing = _pool_gpu(s, vm, gpu)
    lo = s.get("minNodes", _int(0))
    hi = s.get("maxNodes", _int(1))
    if lo is not None and hi is not None and lo > hi:
        s.fail("minNodes", f"{lo} is above maxNodes {hi}")
    spot = s.get("spot", _bool)
    price = s.get("pricePerNodeHour", _number)
    consolidate = s.get("consolidateAfter", _duration_or_zero)
    boot = s.get("bootTime", _duration_or_zero)
    overhead = _block(errors, s.label, s, "daemonsetOverhead", _overhead)
    autoscaler = s.get("autoscaler", _choice({a.value: a for a in Autoscaler}, "autoscaler"))
    if len(errors) > n_errors:
        return None
    return Pool(name, vm_size, gpu, gpus, sharing, cpus, mem, spot, lo, hi, price,
                consolidate_after_seconds=consolidate, boot_seconds=boot,
                daemonset_overhead=overhead, autoscaler=autoscaler)


def _team(errors: list[str], data: Any, index: int) -> Team | None:
    s, n_errors = _entry(errors, data, index, "team")
    team = Team(
        name=s.get("name", _name(_DNS_LABEL, "a DNS label (a-z, 0-9, -)")),
        groups=s.get("groups", _str_list),
        namespace=s.get("namespace", _name(_DNS_LABEL, "a namespace name")),
        quota=s.get("quota", _counts),
        cohort=s.get("cohort", _name(_DNS_LABEL, "a DNS label")),
        borrowing_limit=s.get("borrowingLimit", _counts),
        lending_limit=s.get("lendingLimit", _counts),
    )
    return team if len(errors) == n_errors else None


def _priority(errors: list[str], data: Any, index: int) -> Priority | None:
    s, n_errors = _entry(errors, data, index, "priority")
    prio = Priority(
        name=s.get("name", _name(_DNS_LABEL, "a DNS label (a-z, 0-9, -)")),
        value=s.get("value", _int(-(2**31))),
        description=s.get("description", _str),
        preemptible=s.get("preemptible", _bool),
    )
    return prio if len(errors) == n_errors else None


def _checkpoint(errors: list[str], label: str, data: Any) -> Checkpoint | None:
    s = _Section(errors, f"{label}: checkpoint", data, "checkpoint")
    enabled = s.get("enabled", _bool)
    grace = s.get("gracePeriod", q.parse_duration)
    return None if enabled is None or grace is None else Checkpoint(enabled, grace)


def _percent(v: Any) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < 100:
        raise ValueError(f"must be a percentage between 0 and 100 (exclusive), got {v!r}")
    return float(v)


def _gpu_idle(errors: list[str], label: str, data: Any) -> GpuIdle | None:
    s = _Section(errors, f"{label}: gpuIdle", data, "gpuIdle")
    threshold = s.get("threshold", _percent)
    window = s.get("window", q.parse_duration)
    return None if threshold is None or window is None else GpuIdle(threshold, window)


def _pool_list(v: Any) -> tuple[str, ...]:
    names = _str_list(v)
    if not names:
        raise ValueError("must name at least one pool, the preferred first")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"names pool(s) {', '.join(map(repr, twice))} more than once")
    return names


def _profile_pools(s: _Section) -> tuple[str | None, tuple[str, ...]]:
    """``pool`` (one pool) or ``pools`` (several, in order of preference): the
    preferred pool, and all of them when there are several."""
    if s.given("pool") and s.given("pools"):
        s.fail("pools", "give either pool (one pool) or pools (several, in order of "
               "preference), not both")
        return None, ()
    if s.given("pools"):
        names = s.get("pools", _pool_list)
        return (names[0], names if len(names) > 1 else ()) if names else (None, ())
    if not s.given("pool"):
        s.fail("pool", "is required (or pools: several, in order of preference)")
        return None, ()
    return s.get("pool", _str), ()


def _profile(errors: list[str], data: Any, index: int) -> Profile | None:
    s, n_errors = _entry(errors, data, index, "profile", key="slug")
    pool, pools = _profile_pools(s)
    checkpoint = _block(errors, s.label, s, "checkpoint", _checkpoint)
    gpu_idle = _block(errors, s.label, s, "gpuIdle", _gpu_idle)
    profile = Profile(
        slug=s.get("slug", _name(_DNS_LABEL, "a slug (a-z, 0-9, -)")),
        display_name=s.get("displayName", _str),
        description=s.get("description", _str),
        pool=pool,
        pools=pools,
        units=s.get("gpus", _int(1), None),  # by the pool's kind: _on_pools
        cpu=s.get("cpu", q.parse_cpu),
        memory_bytes=s.get("memory", q.parse_memory),
        image=s.get("image", _str),
        priority=s.get("priority", _str),
        idle_timeout_seconds=s.get("idleTimeout", q.parse_duration, None),  # _on_pools
        max_age_seconds=s.get("maxAge", q.parse_duration),
        queue_patience_seconds=s.get("queuePatience", q.parse_duration),
        start_timeout_seconds=s.get("startTimeout", q.parse_duration),
        gpu_idle=gpu_idle,
        allowed_groups=s.get("allowedGroups", _str_list),
        checkpoint=checkpoint,
        default=s.get("default", _bool),
    )
    return profile if len(errors) == n_errors else None


def _on_pools(errors: list[str], platform: Platform) -> tuple[Profile, ...]:
    """The profiles with the defaults that depend on their pool's kind: on a CPU-only
    pool no GPU units (and no GPU-only field) and the spec's ``cpuIdleTimeout``."""
    pools = {p.name: p for p in platform.pools}
    resolved = []
    for profile in platform.profiles:
        known = [pools[n] for n in profile.pool_names if n in pools]
        # a fallback over a CPU pool is refused by validation, not here
        cpu_only = bool(known) and not any(p.has_gpu for p in known)
        if cpu_only:
            given = [("gpus", profile.units), ("gpuIdle", profile.gpu_idle)]
            for key, value in given:
                if value is not None:
                    errors.append(f"profile {profile.slug!r}: {key}: pool {known[0].name!r} "
                                  f"has no GPU (gpu: {NO_GPU.name}); remove {key}")
        units = 0 if cpu_only else profile.units or field_default("profile", "gpus")
        idle = profile.idle_timeout_seconds
        if idle is None:
            idle = (platform.cpu_idle_timeout_seconds if cpu_only
                    else field_default("profile", "idleTimeout"))
        resolved.append(dataclasses.replace(profile, units=units, idle_timeout_seconds=idle))
    return tuple(resolved)


def _items(errors: list[str], data: Mapping, key: str, parse: Callable) -> tuple:
    raw = data.get(key) or []
    if not isinstance(raw, list):
        errors.append(f"{key}: must be a list")
        return ()
    parsed = (parse(errors, item, i) for i, item in enumerate(raw))
    return tuple(p for p in parsed if p is not None)


def _storage(errors: list[str], data: Any) -> CheckpointStorage | None:
    if data is None:
        return field_default("spec", "checkpointStorage")
    s = _Section(errors, "checkpointStorage", data, "checkpointStorage")
    claim = s.get("claimName", _name(_DNS_LABEL, "a PVC name"))
    mount = s.get("mountPath", _str)
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


def _declared(data: Mapping) -> dict[str, set[str]]:
    """Names the admin declared, valid or not: a reference to one is no new error."""
    def names(key: str, field: str) -> set[str]:
        items = data.get(key) if isinstance(data.get(key), list) else []
        return {i.get(field) for i in items if isinstance(i, Mapping) and isinstance(i.get(field), str)}
    group_ids = data.get("groupIds") if isinstance(data.get("groupIds"), Mapping) else {}
    return {"pools": names("pools", "name"), "priorities": names("priorities", "name"),
            "teams": names("teams", "name"), "profiles": names("profiles", "slug"),
            "groupIds": {g for g in group_ids if isinstance(g, str)}}


def parse_platform(data: Any, source: str = "GPU platform spec") -> Platform:
    """Turn the YAML-loaded spec into a :class:`Platform` or raise :class:`SpecError`."""
    errors: list[str] = []
    top = _Section(errors, "spec", data, "spec")
    platform = Platform(
        pools=_items(errors, top.data, "pools", _pool),
        teams=_items(errors, top.data, "teams", _team),
        priorities=_items(errors, top.data, "priorities", _priority),
        profiles=_items(errors, top.data, "profiles", _profile),
        checkpoint_storage=_storage(errors, top.data.get("checkpointStorage")),
        group_ids=_group_ids(errors, top.data.get("groupIds")),
        cpu_idle_timeout_seconds=top.get("cpuIdleTimeout", q.parse_duration),
        gpu_servers_per_user=top.get("gpuServersPerUser", _int(0)),
    )
    platform = dataclasses.replace(platform, profiles=_on_pools(errors, platform))
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
