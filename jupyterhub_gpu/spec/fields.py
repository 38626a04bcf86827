"""The spec's sections and typed field readers, shared by the parsers of the spec
(:mod:`jupyterhub_gpu.spec.parse`, :mod:`jupyterhub_gpu.spec.jobs`).

:data:`SCHEMA` names each section's dataclass and fields; a field's default is its
dataclass field's (:func:`field_default`). :class:`Section` reads one mapping and puts
every problem, naming the item and the field, into a shared list of errors.
"""

from __future__ import annotations

import math
import re
from types import MappingProxyType
from typing import Any, Callable, Mapping

from . import quantities as q
from .gpus import NO_GPU
from .model import (REQUIRED, Checkpoint, CheckpointStorage, DaemonsetOverhead, GpuIdle,
                    JobProfile, Monitoring, Platform, Pool, Priority, Profile, Sharing, Team, default_of)

_FIELD_DEFAULT = object()
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
POOL_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
SCHEMA: dict[str, tuple[type, dict[str, str]]] = {
    "spec": (Platform, {"pools": "pools", "teams": "teams", "priorities": "priorities",
                        "profiles": "profiles", "checkpointStorage": "checkpoint_storage",
                        "groupIds": "group_ids",
                        "cpuIdleTimeout": "cpu_idle_timeout_seconds",
                        "gpuServersPerUser": "gpu_servers_per_user",
                        "jobProfiles": "job_profiles", "jobsPerUser": "jobs_per_user",
                        "monitoring": "monitoring"}),
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
                    "lendingLimit": "lending_limit", "leadGroups": "lead_groups"}),
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
    "jobProfile": (JobProfile, {"slug": "slug", "displayName": "display_name",
                                "description": "description", "pool": "pool",
                                "pools": "pools", "gpus": "units", "pods": "pods",
                                "cpu": "cpu", "memory": "memory_bytes", "image": "image",
                                "priority": "priority", "maxRunTime": "max_run_seconds",
                                "retries": "retries", "checkpoint": "checkpoint",
                                "allowedGroups": "allowed_groups"}),
    "checkpoint": (Checkpoint, {"enabled": "enabled", "gracePeriod": "grace_period_seconds"}),
    "gpuIdle": (GpuIdle, {"threshold": "threshold_percent", "window": "window_seconds"}),
    "checkpointStorage": (CheckpointStorage, {"claimName": "claim_name",
                                              "mountPath": "mount_path"}),
    "monitoring": (Monitoring, {"gpuUtilizationTarget": "gpu_utilization_target_percent",
                                "queueWaitP95": "queue_wait_p95_seconds",
                                "spotEvictionRate": "spot_eviction_rate",
                                "poolAtMaxFor": "pool_at_max_seconds",
                                "idleGpuNodeFor": "idle_gpu_node_seconds"}),
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
    (:data:`~jupyterhub_gpu.spec.model.REQUIRED` when it has none)."""
    cls, keys = SCHEMA[section]
    return default_of(cls, keys[key])


class SpecError(ValueError):
    """The spec is invalid; ``errors`` lists every problem found."""

    def __init__(self, errors: list[str], source: str = "GPU platform spec"):
        self.errors = list(errors)
        lines = "\n".join(f"  - {e}" for e in self.errors)
        super().__init__(f"{source} has {len(self.errors)} error(s):\n{lines}")


class Section:
    """Typed reads of one mapping; problems go to ``errors`` prefixed by ``label``."""

    def __init__(self, errors: list[str], label: str, data: Any, section: str):
        self.errors, self.label, self.section = errors, label, section
        self.data: Mapping = data if isinstance(data, Mapping) else {}
        #: whether ``data`` is no mapping: that is its one error, not each field missing
        self.broken = not isinstance(data, Mapping)
        if self.broken:
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
            if default is REQUIRED and not self.broken:
                self.fail(key, "is required")
            return None if default is REQUIRED else default
        try:
            return parse(self.data[key])
        except (ValueError, TypeError) as e:
            self.fail(key, str(e))
            return None


def read_str(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"must be a non-empty string, got {v!r}")
    return v


def read_int(minimum: int) -> Callable[[Any], int]:
    def parse(v: Any) -> int:
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise ValueError(f"must be an integer >= {minimum}, got {v!r}")
        return v
    return parse


def read_number(v: Any) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < math.inf:
        raise ValueError(f"must be a number >= 0, got {v!r}")
    return float(v)


def read_duration_or_zero(v: Any) -> int:
    return q.parse_duration(v, allow_zero=True)


def read_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"must be true or false, got {v!r}")
    return v


def read_name(pattern: re.Pattern, what: str) -> Callable[[Any], str]:
    def parse(v: Any) -> str:
        if not isinstance(v, str) or not pattern.match(v):
            raise ValueError(f"{v!r} is not {what}")
        return v
    return parse


def read_names(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise ValueError(f"must be a list of names, got {v!r}")
    return tuple(v)


def read_choice(options: Mapping[str, Any], what: str) -> Callable[[Any], Any]:
    def parse(v: Any) -> Any:
        if v not in options:
            raise ValueError(f"unknown {what} {v!r}; valid: {', '.join(options)}")
        return options[v]
    return parse


def read_counts(v: Any) -> Mapping[str, int]:
    if not isinstance(v, Mapping) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in v.values()
    ):
        raise ValueError(f"must map pool names to whole numbers >= 0, got {v!r}")
    return MappingProxyType(dict(v))


def read_block(errors: list[str], label: str, s: Section, key: str, parse: Callable) -> Any:
    """The sub-mapping ``key`` of ``s`` parsed by ``parse``, else the field's default."""
    if not s.given(key):
        return field_default(s.section, key)
    return parse(errors, label, s.data[key])


def list_entry(errors: list[str], data: Any, index: int, section: str,
           key: str = "name") -> tuple[Section, int]:
    """One item of a list (``pools[3]``), labelled by its ``key`` once it has one, and
    the count of errors before it."""
    name = data.get(key) if isinstance(data, Mapping) else None
    word = JobProfile.kind if section == "jobProfile" else section
    label = f"{word} {name!r}" if isinstance(name, str) else f"{PLURAL[section]}[{index}]"
    n_errors = len(errors)
    return Section(errors, label, data, section), n_errors


PLURAL = {"pool": "pools", "team": "teams", "priority": "priorities", "profile": "profiles",
          "jobProfile": "jobProfiles"}


def read_checkpoint(errors: list[str], label: str, data: Any) -> Checkpoint | None:
    s = Section(errors, f"{label}: checkpoint", data, "checkpoint")
    enabled = s.get("enabled", read_bool)
    grace = s.get("gracePeriod", q.parse_duration)
    return None if enabled is None or grace is None else Checkpoint(enabled, grace)


def read_pool_list(v: Any) -> tuple[str, ...]:
    names = read_names(v)
    if not names:
        raise ValueError("must name at least one pool, the preferred first")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"names pool(s) {', '.join(map(repr, twice))} more than once")
    return names


def read_profile_pools(s: Section) -> tuple[str | None, tuple[str, ...]]:
    """``pool`` (one pool) or ``pools`` (several, in order of preference): the
    preferred pool, and all of them when there are several."""
    if s.given("pool") and s.given("pools"):
        s.fail("pools", "give either pool (one pool) or pools (several, in order of "
               "preference), not both")
        return None, ()
    if s.given("pools"):
        names = s.get("pools", read_pool_list)
        return (names[0], names if len(names) > 1 else ()) if names else (None, ())
    if not s.given("pool"):
        s.fail("pool", "is required (or pools: several, in order of preference)")
        return None, ()
    return s.get("pool", read_str), ()


def profile_fields(s: Section) -> dict[str, Any]:
    """The fields a notebook profile and a job profile share, as their dataclasses'
    keyword arguments (``units`` None when not given: its default is the pool's)."""
    pool, pools = read_profile_pools(s)
    return dict(
        checkpoint=read_block(s.errors, s.label, s, "checkpoint", read_checkpoint),
        slug=s.get("slug", read_name(DNS_LABEL, "a slug (a-z, 0-9, -)")),
        display_name=s.get("displayName", read_str),
        description=s.get("description", read_str),
        pool=pool,
        pools=pools,
        units=s.get("gpus", read_int(1), None),
        cpu=s.get("cpu", q.parse_cpu),
        memory_bytes=s.get("memory", q.parse_memory),
        priority=s.get("priority", read_str),
        allowed_groups=s.get("allowedGroups", read_names),
    )


def read_items(errors: list[str], data: Mapping, key: str, parse: Callable) -> tuple:
    raw = data.get(key) or []
    if not isinstance(raw, list):
        errors.append(f"{key}: must be a list")
        return ()
    parsed = (parse(errors, item, i) for i, item in enumerate(raw))
    return tuple(p for p in parsed if p is not None)


def units_on_pools(errors: list[str], platform: Platform, item: Profile | JobProfile,
                   section: str, gpu_only: Mapping[str, Any]) -> tuple[bool, int]:
    """Whether ``item`` runs on a CPU-only pool, and its GPU units: none there (each of
    ``gpu_only``, the fields only a GPU pool takes, given there is an error), else the
    units given or the section's default. A fallback over a CPU pool is refused by
    validation, not here."""
    pools = {p.name: p for p in platform.pools}
    known = [pools[n] for n in item.pool_names if n in pools]
    cpu_only = bool(known) and not any(p.has_gpu for p in known)
    if cpu_only:
        for key, value in gpu_only.items():
            if value is not None:
                errors.append(f"{item.kind} {item.slug!r}: {key}: pool {known[0].name!r} "
                              f"has no GPU (gpu: {NO_GPU.name}); remove {key}")
    return cpu_only, 0 if cpu_only else item.units or field_default(section, "gpus")
