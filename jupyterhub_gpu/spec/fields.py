"""The spec's sections, read through the fields their dataclasses declare, shared by
the parsers of the spec (:mod:`jupyterhub_gpu.spec.parse`, :mod:`jupyterhub_gpu.spec.jobs`).

Each field is declared once, on its dataclass field (:func:`jupyterhub_gpu.spec.keys.key`:
YAML key, reader, default, description). :data:`SECTIONS` names each section's
dataclass; :data:`KEYS`, :data:`SCHEMA` and :data:`FIELDS` are read from the
declarations. :class:`Section` reads one mapping with the declared readers and puts
every problem, naming the item and the field, into a shared list of errors.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Mapping

from .gpus import NO_GPU
from .keys import Key, default_of, keys_of
from .model import (REQUIRED, Checkpoint, CheckpointStorage, DaemonsetOverhead, GpuIdle,
                    JobProfile, Monitoring, Platform, Pool, Priority, Profile, Sharing, Team)

_FIELD_DEFAULT = object()
SECTIONS: dict[str, type] = {
    "spec": Platform, "pool": Pool, "sharing": Sharing, "daemonsetOverhead": DaemonsetOverhead,
    "team": Team, "priority": Priority, "profile": Profile, "jobProfile": JobProfile,
    "checkpoint": Checkpoint, "gpuIdle": GpuIdle, "checkpointStorage": CheckpointStorage,
    "monitoring": Monitoring,
}
"""Each section of the spec (in the order the docs list them) and the dataclass it fills."""
KEYS: dict[str, dict[str, tuple[str, Key]]] = {
    name: keys_of(cls) for name, cls in SECTIONS.items()}
"""Each section's fields, as its dataclass declares them: YAML key -> (dataclass field,
:class:`~jupyterhub_gpu.spec.keys.Key`)."""
SCHEMA: dict[str, tuple[type, dict[str, str]]] = {
    name: (SECTIONS[name], {k: attr for k, (attr, _) in keys.items()})
    for name, keys in KEYS.items()}
"""Each section: the dataclass it fills, and its fields with the dataclass field each one
sets (read from the dataclasses' declarations)."""
FIELDS: dict[str, tuple[str, ...]] = {name: tuple(keys) for name, keys in KEYS.items()}
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


def unknown_field(key: Any, allowed: tuple[str, ...]) -> str:
    """What an unknown field's error says: the closest allowed field, if one is close,
    then all of them."""
    close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.8)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown field{hint}; allowed: {', '.join(allowed)}"


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
            self.fail(key, removed.get(key) or unknown_field(key, allowed))

    def fail(self, key: str | None, message: str) -> None:
        self.errors.append(f"{self.label}: {key}: {message}" if key else f"{self.label}: {message}")

    def given(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = _FIELD_DEFAULT,
            parse: Callable[[Any], Any] | None = None) -> Any:
        """``key`` read by its declared reader (or ``parse``); when absent, ``default``,
        by default the field's own (:func:`field_default`); a required field that is
        absent is an error."""
        read = parse or KEYS[self.section][key][1].read
        if default is _FIELD_DEFAULT:
            default = field_default(self.section, key)
        if not self.given(key):
            if default is REQUIRED and not self.broken:
                self.fail(key, "is required")
            return None if default is REQUIRED else default
        try:
            return read(self.data[key])
        except (ValueError, TypeError) as e:
            self.fail(key, str(e))
            return None

    def values(self) -> dict[str, Any]:
        """Every field that has a reader, read in the declared order, as keyword
        arguments of the section's dataclass."""
        return {attr: self.get(key) for key, (attr, spec) in KEYS[self.section].items()
                if spec.read is not None}


def read_section(errors: list[str], label: str, data: Any, section: str) -> Any:
    """A block whose fields are all read by their declared readers (``checkpoint``,
    ``gpuIdle`` ...), as its dataclass; None when it is no mapping or a field is in
    error."""
    s = Section(errors, label, data, section)
    n_errors = len(errors)
    values = s.values()
    return None if s.broken or len(errors) > n_errors else SECTIONS[section](**values)


def read_block(s: Section, key: str, parse: Callable = read_section) -> Any:
    """The block ``key`` of ``s`` (the section of the same name), read by ``parse``
    (``errors, label, data, section``), else the field's default. A block at the top
    level is named by its key alone, one further down after its item: ``profile 'x':
    gpuIdle``."""
    if not s.given(key):
        return field_default(s.section, key)
    label = key if s.section == "spec" else f"{s.label}: {key}"
    return parse(s.errors, label, s.data[key], key)


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


def read_entry(errors: list[str], data: Any, index: int, section: str) -> Any:
    """An item of a list whose fields are all read by their declared readers
    (``teams[]``, ``priorities[]``), or None when it has an error."""
    s, n_errors = list_entry(errors, data, index, section)
    item = SECTIONS[section](**s.values())
    return item if len(errors) == n_errors else None


def read_profile_pools(s: Section) -> tuple[str | None, tuple[str, ...]]:
    """``pool`` (one pool) or ``pools`` (several, in order of preference): the
    preferred pool, and all of them when there are several."""
    if s.given("pool") and s.given("pools"):
        s.fail("pools", "give either pool (one pool) or pools (several, in order of "
               "preference), not both")
        return None, ()
    if s.given("pools"):
        names = s.get("pools")
        return (names[0], names if len(names) > 1 else ()) if names else (None, ())
    if not s.given("pool"):
        s.fail("pool", "is required (or pools: several, in order of preference)")
        return None, ()
    return s.get("pool"), ()


def profile_fields(s: Section) -> dict[str, Any]:
    """The fields a notebook profile and a job profile share, as their dataclasses'
    keyword arguments (``units`` None when not given: its default is the pool's)."""
    pool, pools = read_profile_pools(s)
    return dict(
        checkpoint=read_block(s, "checkpoint"),
        slug=s.get("slug"),
        display_name=s.get("displayName"),
        description=s.get("description"),
        pool=pool,
        pools=pools,
        units=s.get("gpus", None),
        cpu=s.get("cpu"),
        memory_bytes=s.get("memory"),
        priority=s.get("priority"),
        allowed_groups=s.get("allowedGroups"),
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
