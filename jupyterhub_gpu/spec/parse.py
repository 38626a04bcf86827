"""Parse the admin's GPU platform spec once into :class:`~jupyterhub_gpu.spec.model.Platform`.

Every problem is collected, each naming the pool, team, priority or profile and the
field, and all of them are raised together as one :class:`SpecError`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from . import sharing as modes
from .boot import default_boot_seconds
from .images import notebook_image
from .gpus import NO_GPU, VM_SIZES
from .jobs import job_profile, job_profiles_on_pools
from .sharing import Parameter
from .model import Platform, Pool, Profile, Sharing
from .fields import (FIELDS, REMOVED, SCHEMA, Section, SpecError, field_default,
                     list_entry, profile_fields, read_block, read_entry, read_items,
                     units_on_pools)
from .validate import REQUIRED_SECTIONS, check_platform

__all__ = ["FIELDS", "REMOVED", "SCHEMA", "SpecError", "field_default", "load_platform",
           "parse_platform", "parse_platform_text"]

#: The one error of an empty spec.
EMPTY = (f"the file is empty (or only comments): a spec is a mapping with at least "
         f"{', '.join(REQUIRED_SECTIONS)} (every field: docs/reference/spec.md)")

#: What an error adds when a sharing mode's parameter is missing.
_PARAMETER_HINTS: dict[Parameter, str] = {Parameter.MIG_PROFILE: "",
                                          Parameter.REPLICAS: " (an integer >= 2)"}


def _sharing(errors: list[str], label: str, data: Any, gpu: Any) -> Sharing | None:
    """``pools[].sharing``: a registered mode and exactly the parameter it takes."""
    n_errors = len(errors)
    s = Section(errors, f"{label}: sharing", data, "sharing")
    mode = s.get("mode")
    values = {p: s.get(p.value, None) for p in _PARAMETER_HINTS}
    for param, value in values.items():
        if mode is None:
            break
        if mode.parameter is param and not s.given(param.value):
            s.fail(param.value, f"is required for mode {mode}{_PARAMETER_HINTS[param]}")
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


#: Fields of a pool that only a pool with a GPU may set.
GPU_POOL_FIELDS = ("gpusPerNode", "sharing")
#: Fields of a profile that only a profile on a pool with a GPU may set.
GPU_PROFILE_FIELDS = ("gpus", "gpuIdle", "kernelIdleTimeout")


def _pool_gpu(s: Section, vm: Any, gpu: Any) -> tuple[int | None, Sharing | None]:
    """``gpusPerNode`` and ``sharing``; a pool with ``gpu: none`` may set neither."""
    if gpu is NO_GPU:
        for key in GPU_POOL_FIELDS:
            if s.given(key):
                s.fail(key, f"a pool with gpu: {NO_GPU.name} has no GPU; remove {key}")
        return 0, Sharing(modes.cpu_only_mode())
    gpus = s.get("gpusPerNode", vm.gpus if vm is not None else None)  # as cpusPerNode
    sharing = s.get("sharing", parse=lambda data: _sharing(s.errors, s.label, data, gpu))
    if sharing is not None and not sharing.mode.gpu:
        s.fail("sharing", f"mode {sharing.mode} is for pools with gpu: {NO_GPU.name}; "
               f"choose a GPU sharing mode")
    return gpus, sharing


#: What a pool of a VM size the project does not know must say itself.
VM_FIELDS = ("cpusPerNode", "memoryPerNode", "gpusPerNode")


def _unknown_vm_size(s: Section, vm_size: Any, gpu: Any) -> None:
    """One error for a VM size not in :data:`VM_SIZES` whose pool does not give what
    the size would have: the size, the nearest known ones and the fields to set."""
    needed = [f for f in VM_FIELDS if not s.given(f)
              and (f != "gpusPerNode" or gpu is not NO_GPU)]
    if not isinstance(vm_size, str) or not needed:
        return
    close = difflib.get_close_matches(vm_size, VM_SIZES, n=1, cutoff=0.8)
    hint = f" (did you mean {close[0]}?)" if close else ""
    s.fail("vmSize", f"unknown VM size {vm_size!r}{hint}; known: {', '.join(VM_SIZES)}; "
           f"for another size set {', '.join(needed)}")


def _pool(errors: list[str], data: Any, index: int) -> Pool | None:
    s, n_errors = list_entry(errors, data, index, "pool")
    name = s.get("name")
    vm_size = s.get("vmSize")
    vm = VM_SIZES.get(vm_size or "")
    gpu = s.get("gpu")
    known = vm is not None
    if not known:
        _unknown_vm_size(s, vm_size, gpu)
    # without a known size, vmSize's one error (required, invalid or unknown) says
    # what is missing, not each field
    cpus = s.get("cpusPerNode", vm.cpus if known else None)
    mem = s.get("memoryPerNode", vm.memory_gib * 2**30 if known else None)
    if known and gpu is not None and vm.gpu != gpu.name:
        carries = vm.gpu if vm.gpus else "no GPU"
        s.fail("gpu", f"{vm_size} carries {carries}, not {gpu.name}")
    gpus, sharing = _pool_gpu(s, vm, gpu)
    lo = s.get("minNodes")
    hi = s.get("maxNodes")
    if lo is not None and hi is not None and lo > hi:
        s.fail("minNodes", f"{lo} is above maxNodes {hi}")
    spot = s.get("spot")
    price = s.get("pricePerNodeHour")
    consolidate = s.get("consolidateAfter")
    boot = s.get("bootTime")  # None: by the pool's kind, once its sharing is known
    overhead = read_block(s, "daemonsetOverhead")
    autoscaler = s.get("autoscaler")
    if len(errors) > n_errors:
        return None
    if boot is None:
        boot = default_boot_seconds(sharing)
    return Pool(name=name, vm_size=vm_size, gpu=gpu, gpus_per_node=gpus, sharing=sharing,
                cpus_per_node=cpus, memory_per_node=mem, spot=spot, min_nodes=lo,
                max_nodes=hi, price_per_node_hour=price,
                consolidate_after_seconds=consolidate, boot_seconds=boot,
                daemonset_overhead=overhead, autoscaler=autoscaler)


def _team(errors: list[str], data: Any, index: int) -> Any:
    return read_entry(errors, data, index, "team")


def _priority(errors: list[str], data: Any, index: int) -> Any:
    return read_entry(errors, data, index, "priority")


def _profile(errors: list[str], data: Any, index: int) -> Profile | None:
    s, n_errors = list_entry(errors, data, index, "profile", key="slug")
    common = profile_fields(s)  # gpus by the pool's kind: _on_pools
    profile = Profile(
        **common,
        image=s.get("image"),
        idle_timeout_seconds=s.get("idleTimeout", None),  # _on_pools
        max_age_seconds=s.get("maxAge"),
        queue_patience_seconds=s.get("queuePatience"),
        start_timeout_seconds=s.get("startTimeout"),
        gpu_idle=read_block(s, "gpuIdle"),
        kernel_idle_timeout_seconds=s.get("kernelIdleTimeout", None),  # _on_pools
        default=s.get("default"),
    )
    return profile if len(errors) == n_errors else None


def _on_pools(errors: list[str], platform: Platform) -> tuple[Profile, ...]:
    """The profiles with the defaults that depend on their pool's kind (on a CPU-only
    pool no GPU units, no GPU-only field, and the spec's ``cpuIdleTimeout``) or on the
    spec (the notebook image in its ``registry``)."""
    resolved = []
    for profile in platform.profiles:
        given = (profile.units, profile.gpu_idle, profile.kernel_idle_timeout_seconds)
        cpu_only, units = units_on_pools(errors, platform, profile, "profile",
                                         dict(zip(GPU_PROFILE_FIELDS, given)))
        kernel_idle = (None if cpu_only else profile.kernel_idle_timeout_seconds
                       or field_default("profile", "kernelIdleTimeout"))
        idle = profile.idle_timeout_seconds
        if idle is None:
            idle = (platform.cpu_idle_timeout_seconds if cpu_only
                    else field_default("profile", "idleTimeout"))
        image = profile.image or (":".join(notebook_image(platform.registry))
                                  if platform.registry else None)
        resolved.append(dataclasses.replace(profile, units=units, idle_timeout_seconds=idle,
                                            kernel_idle_timeout_seconds=kernel_idle,
                                            image=image))
    return tuple(resolved)


_OBJECT_ID = re.compile(r"^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")


def _group_ids(errors: list[str], label: str, data: Any, _: str) -> Mapping[str, str]:
    """``groupIds``: JupyterHub group name -> the Entra ID group's object ID."""
    if not isinstance(data, Mapping):
        errors.append(f"{label}: must be a mapping of group name to object ID")
        return MappingProxyType({})
    ids: dict[str, str] = {}
    for name, oid in data.items():
        if not isinstance(name, str) or not name.strip():
            errors.append(f"{label}: {name!r}: a group name must be a non-empty string")
        elif not isinstance(oid, str) or not _OBJECT_ID.match(oid):
            errors.append(f"{label}: {name}: {oid!r} is not an object ID "
                          "(like 2f1c8a3e-5b7d-4e9f-8a1b-0c2d3e4f5a6b)")
        elif oid.lower() in ids.values():
            other = next(n for n, i in ids.items() if i == oid.lower())
            errors.append(f"{label}: {name}: object ID {oid} is also {other!r}")
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
    if not isinstance(data, Mapping):  # its one error: no section can be read
        raise SpecError([f"spec: must be a mapping of {', '.join(REQUIRED_SECTIONS)} ..., "
                         f"got {type(data).__name__}"], source)
    errors: list[str] = []
    top = Section(errors, "spec", data, "spec")
    platform = Platform(
        pools=read_items(errors, top.data, "pools", _pool),
        teams=read_items(errors, top.data, "teams", _team),
        priorities=read_items(errors, top.data, "priorities", _priority),
        profiles=read_items(errors, top.data, "profiles", _profile),
        checkpoint_storage=read_block(top, "checkpointStorage"),
        group_ids=read_block(top, "groupIds", _group_ids),
        cpu_idle_timeout_seconds=top.get("cpuIdleTimeout"),
        gpu_servers_per_user=top.get("gpuServersPerUser"),
        job_profiles=read_items(errors, top.data, "jobProfiles", job_profile),
        gpu_kernels_per_user=top.get("gpuKernelsPerUser"),
        jobs_per_user=top.get("jobsPerUser"),
        # an unreadable block: its errors are listed, its alerts keep their defaults
        monitoring=read_block(top, "monitoring") or field_default("spec", "monitoring"),
        registry=top.get("registry"),
    )
    platform = dataclasses.replace(platform, profiles=_on_pools(errors, platform),
                                   job_profiles=job_profiles_on_pools(errors, platform))
    errors.extend(check_platform(platform, _declared(top.data)))
    if errors:
        raise SpecError(errors, source)
    return platform


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error in one line, where it is by line and column (from 1), as an editor
    counts them."""
    mark = getattr(error, "problem_mark", None)
    if mark is None:
        return f"not valid YAML: {error}"
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context, where = getattr(error, "context", None), getattr(error, "context_mark", None)
    since = (f" ({context} at line {where.line + 1}, column {where.column + 1})"
             if context and where else "")
    return f"line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {problem}{since}"


def parse_platform_text(text: str | bytes, source: str) -> Platform:
    """Parse a spec's YAML text; ``source`` (e.g. its file) names it in the errors."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError([yaml_problem(e)], source) from e
    if data is None:
        raise SpecError([EMPTY], source)
    return parse_platform(data, source=source)


def load_platform(path: str | Path) -> Platform:
    """Read and parse a spec file (YAML)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError([f"cannot read the file: {e.strerror}"], str(path)) from e
    return parse_platform_text(text, str(path))
