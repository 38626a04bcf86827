"""Bad specs at scale: every broken spec stops the hub at start-up, each of its errors
naming the item and the field, all at once; and no mutation of the example spec,
however random, crashes the parser (every failure is a :class:`SpecError` whose errors
each start with the item and field they are about).

The table drives :func:`jupyterhub_gpu.configure_hub`, the call in the hub's
``jupyterhub_config.py`` (it loads the spec through the hub's shared
:class:`~jupyterhub_gpu.spec.source.SpecSource`); one real ``jupyterhub`` process shows
that this stops the hub with the errors in its output.
"""

from __future__ import annotations

import copy
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from traitlets.config import Config

from jupyterhub_gpu import configure_hub
from jupyterhub_gpu.spec.parse import FIELDS, SpecError, parse_platform
from jupyterhub_gpu.spec.fields import PLURAL

# -- where an error points ------------------------------------------------------------

#: The section an item label names ("pool 'a100'", "pools[3]") and its list in the spec.
_KINDS = {"pool": "pool", "team": "team", "priority": "priority", "profile": "profile",
          "job profile": "jobProfile"}
_SUBSECTIONS = {("pool", "sharing"): "sharing", ("pool", "daemonsetOverhead"):
                "daemonsetOverhead", ("profile", "gpuIdle"): "gpuIdle",
                ("profile", "checkpoint"): "checkpoint", ("jobProfile", "checkpoint"):
                "checkpoint"}
_QUOTED = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
_ITEM = re.compile(rf"^(?P<kind>job profile|pool|team|priority|profile) (?P<name>{_QUOTED})"
                   rf"(?: on pool {_QUOTED})?(?=: )")
#: fallback profiles whose orders of preference form a cycle
_CYCLE = re.compile(rf"^profiles {_QUOTED}(?:, {_QUOTED})+(?=: )")
_INDEXED = re.compile(r"^(?P<list>pools|teams|priorities|profiles|jobProfiles)\[(?P<i>\d+)\]"
                      r"(?=: )")


def error_path(error: str) -> tuple[str, ...]:
    """Where ``error`` points: the item (``pool 'a100'``, ``pools[3]``, or a top-level
    field of the spec) and the fields under it, down to the one at fault, as the
    error's first ``: ``-separated parts. Empty when it names no known place."""
    for pattern, section_of in ((_ITEM, lambda m: _KINDS[m["kind"]]),
                                (_INDEXED, lambda m: {v: k for k, v in PLURAL.items()}[m["list"]]),
                                (_CYCLE, lambda m: "profile")):
        m = pattern.match(error)
        if m:
            return (m.group(0), *_fields(section_of(m), error[m.end() + 2:]))
    head, _, rest = error.partition(": ")
    if head == "spec":
        key = rest.partition(": ")[0]
        known = key in FIELDS["spec"] or rest.startswith(key + ": unknown field")
        return ("spec", key) if known and ": " in rest else ("spec",)
    if head in FIELDS["spec"]:
        sub = {"checkpointStorage": "checkpointStorage"}.get(head)
        return (head, *(_fields(sub, rest) if sub else _group_or_field(head, rest)))
    return ()


def _group_or_field(head: str, rest: str) -> tuple[str, ...]:
    """``groupIds: <group>: ...`` names the group; ``profiles: default: ...`` a field."""
    first = rest.partition(": ")[0]
    if head == "groupIds" and ": " in rest:
        return (first,)
    return (first,) if first in FIELDS["profile"] else ()


def _fields(section: str, rest: str) -> tuple[str, ...]:
    """The leading ``field: `` parts of ``rest`` that are fields of ``section`` (or the
    one unknown field an "unknown field" error names), descending into sub-sections."""
    path: list[str] = []
    while section and ": " in rest:
        key, _, after = rest.partition(": ")
        if key not in FIELDS[section] and not after.startswith(("unknown field", "no longer")):
            break
        path.append(key)
        section, rest = _SUBSECTIONS.get((section, key)), after
    return tuple(path)


def path_text(error: str) -> str:
    return ": ".join(error_path(error))


# -- the hub's start-up path ----------------------------------------------------------


def start_hub_config(spec: Any, tmp_path: Path) -> SpecError:
    """What ``configure_hub`` in the hub's config raises for ``spec`` (written as the
    YAML file the hub reads); fails the test if it accepts it or raises anything else."""
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SpecError) as info:
        configure_hub(Config(), str(path), resume=False)
    assert type(info.value) is SpecError
    assert str(info.value).startswith(f"{path} has {len(info.value.errors)} error(s):")
    return info.value


#: changes a spec in place, or returns the spec to use instead
Edit = Callable[[dict], Any]


def put(path: str, value: Any) -> Edit:
    """Set ``a.0.b`` in the spec (``DROP`` deletes the key or list item)."""
    def edit(spec: dict) -> None:
        *parents, last = path.split(".")
        node: Any = spec
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        key = int(last) if isinstance(node, list) else last
        if value is DROP:
            del node[key]
        else:
            node[key] = value
    return edit


DROP = object()


def append(path: str, item: Any) -> Edit:
    def edit(spec: dict) -> None:
        spec[path].append(copy.deepcopy(item))
    return edit


def copy_item(path: str, index: int, **changes: Any) -> Edit:
    """Append a copy of ``spec[path][index]`` with ``changes`` (a duplicate)."""
    def edit(spec: dict) -> None:
        spec[path].append({**copy.deepcopy(spec[path][index]), **changes})
    return edit


H100 = {"name": "h100", "vmSize": "Standard_ND96isr_H100_v5", "gpu": "H100-80GB",
        "sharing": {"mode": "exclusive"}, "minNodes": 0, "maxNodes": 2}

# Each row: what is broken, the edits to the example spec, and the path of every error
# the hub must refuse it with (exactly these, no more).
BROKEN: list[tuple[str, list[Edit], list[str]]] = [
    # missing required fields
    ("pool without a name", [append("pools", {k: v for k, v in H100.items() if k != "name"})],
     ["pools[5]: name"]),
    ("pool without a gpu", [put("pools.2.gpu", DROP)], ["pool 'a100spot': gpu"]),
    ("unknown VM size without sizes", [put("pools.4.vmSize", "Standard_Z9")],
     ["pool 'cpu': vmSize"]),
    ("team without a namespace", [put("teams.1.namespace", DROP)],
     ["team 'ml-eng': namespace"]),
    ("priority without a value", [put("priorities.1.value", DROP)],
     ["priority 'batch': value"]),
    ("profile without a pool", [put("profiles.4.pool", DROP)], ["profile 'cpu': pool"]),
    ("registry that is no ACR name", [put("registry", "My_Registry")],
     ["spec: registry"]),
    ("job profile without a slug", [put("jobProfiles.3.slug", DROP)], ["jobProfiles[3]: slug"]),
    ("no teams at all", [put("teams", [])], ["teams"]),
    # wrong types
    ("spec is a list", [lambda spec: [spec]],
     ["spec"]),
    ("pools is a mapping", [put("pools", {"t4dev": {}})], ["pools"]),
    ("pool entry is a string", [append("pools", "h100")], ["pools[5]"]),
    ("GPU pool without sharing", [put("pools.3.sharing", DROP)], ["pool 'a100': sharing"]),
    ("maxNodes as a string", [put("pools.0.maxNodes", "five")], ["pool 't4dev': maxNodes"]),
    ("spot as a string", [put("pools.2.spot", "yes")], ["pool 'a100spot': spot"]),
    ("groups a string", [put("teams.0.groups", "data-science")],
     ["team 'data-science': groups"]),
    ("quota a list", [put("teams.2.quota", ["t4dev", 4])], ["team 'experimentation': quota"]),
    ("preemptible a number", [put("priorities.2.preemptible", 1)],
     ["priority 'preemptible': preemptible"]),
    ("gpus a float", [put("profiles.1.gpus", 0.5)], ["profile 'a100-mig-3g': gpus"]),
    ("default a string", [put("profiles.0.default", "yes")], ["profile 't4-shared': default"]),
    ("gpuServersPerUser negative", [put("gpuServersPerUser", -1)], ["spec: gpuServersPerUser"]),
    # unknown keys
    ("unknown top-level key", [put("profile", [])], ["spec: profile"]),
    ("unknown pool key", [put("pools.1.labels", {"a": "b"})], ["pool 'a100mig': labels"]),
    ("unknown sharing key", [put("pools.0.sharing.slices", 4)],
     ["pool 't4dev': sharing: slices"]),
    ("unknown profile key (a typo)", [put("profiles.2.maxage", "24h")],
     ["profile 'a100-training': maxage"]),
    ("unknown job profile key", [put("jobProfiles.0.queue", "gpu")],
     ["job profile 'a100-train': queue"]),
    ("removed team key", [put("teams.0.fairShareWeight", 2)],
     ["team 'data-science': fairShareWeight"]),
    # bad quantities
    ("cpu not a quantity", [put("profiles.0.cpu", "two")], ["profile 't4-shared': cpu"]),
    ("cpu zero", [put("jobProfiles.3.cpu", 0)], ["job profile 'cpu-job': cpu"]),
    ("cpu infinite (YAML .inf)", [put("profiles.2.cpu", math.inf)],
     ["profile 'a100-training': cpu"]),
    ("cpu not a number (YAML .nan)", [put("pools.0.daemonsetOverhead", {"cpu": math.nan})],
     ["pool 't4dev': daemonsetOverhead: cpu"]),
    ("memory half a byte", [put("profiles.4.memory", 0.5)], ["profile 'cpu': memory"]),
    ("memory without a number", [put("profiles.4.memory", "Gi")], ["profile 'cpu': memory"]),
    ("memory in lower-case units", [put("profiles.4.memory", "8gb")], ["profile 'cpu': memory"]),
    ("memoryPerNode negative", [put("pools.4.memoryPerNode", "-32Gi")],
     ["pool 'cpu': memoryPerNode"]),
    ("daemonset memory bad", [put("pools.3.daemonsetOverhead", {"cpu": 1, "memory": "x"})],
     ["pool 'a100': daemonsetOverhead: memory"]),
    ("profile asks more cpu than a node has", [put("profiles.3.cpu", 30)],
     ["profile 'a100-spot' on pool 'a100spot': cpu"]),
    ("job pod asks more memory than a node has", [put("jobProfiles.1.memory", "300Gi")],
     ["job profile 'a100-ddp-2' on pool 'a100spot': memory"]),
    # references to undefined pools, teams, priorities, groups
    ("profile on an undefined pool", [put("profiles.1.pool", "h100")],
     ["profile 'a100-mig-3g': pool"]),
    ("fallback to an undefined pool", [put("profiles.2.pools", ["a100spot", "a100x"])],
     ["profile 'a100-training': pools"]),
    ("job profile on an undefined pool", [put("jobProfiles.2.pool", "t4")],
     ["job profile 't4-job': pool"]),
    ("quota for an undefined pool", [put("teams.1.quota.h100", 2)], ["team 'ml-eng': quota"]),
    ("borrowing from an undefined pool", [put("teams.2.borrowingLimit", {"a100x": 1})],
     ["team 'experimentation': borrowingLimit"]),
    ("undefined priority", [put("profiles.0.priority", "urgent")],
     ["profile 't4-shared': priority"]),
    ("job with an undefined priority", [put("jobProfiles.3.priority", "low")],
     ["job profile 'cpu-job': priority"]),
    ("group without an object ID", [put("profiles.1.allowedGroups", ["data-science", "ops"])],
     ["profile 'a100-mig-3g': allowedGroups"]),
    # duplicate names
    ("duplicate pool", [copy_item("pools", 0)], ["pool 't4dev'"]),
    ("duplicate team", [copy_item("teams", 2, namespace="jhub-exp2")],
     ["team 'experimentation'"]),
    ("duplicate profile slug", [put("profiles.1.slug", "t4-shared")], ["profile 't4-shared'"]),
    ("duplicate job profile slug", [copy_item("jobProfiles", 2)], ["job profile 't4-job'"]),
    ("fallback names a pool twice", [put("profiles.2.pools", ["a100spot", "a100spot"])],
     ["profile 'a100-training': pools"]),
    ("two default profiles", [put("profiles.4.default", True)], ["profiles: default"]),
    ("one object ID for two groups",
     [put("groupIds.ops", "00000000-0000-0000-0000-00000000D5D5")], ["groupIds: ops"]),
    # the pool's machine against its GPU model (its node labels)
    ("VM size of another GPU", [put("pools.0.gpu", "A10")], ["pool 't4dev': gpu"]),
    ("GPU fields on a CPU pool", [put("pools.4.gpusPerNode", 1)],
     ["pool 'cpu': gpusPerNode"]),
    ("GPU sharing on a CPU pool", [put("pools.4.sharing", {"mode": "mps", "replicas": 2})],
     ["pool 'cpu': sharing"]),
    ("CPU mode on a GPU pool", [put("pools.3.sharing", {"mode": "none"})],
     ["pool 'a100': sharing"]),
    ("gpus on a CPU pool", [put("profiles.4.gpus", 1)], ["profile 'cpu': gpus"]),
    ("fallback mixing sharing modes", [put("profiles.2.pools", ["a100spot", "a100mig"])],
     ["profile 'a100-training': pools"]),
    # MIG, MPS, time-slicing
    ("MIG profile of another GPU", [put("pools.1.sharing.migProfile", "3g.20gb")],
     ["pool 'a100mig': sharing: migProfile"]),
    ("MIG on a T4", [put("pools.0.sharing", {"mode": "mig", "migProfile": "1g.10gb"})],
     ["pool 't4dev': sharing: migProfile"]),
    ("MIG without a profile", [put("pools.1.sharing", {"mode": "mig"})],
     ["pool 'a100mig': sharing: migProfile"]),
    ("time-slicing without replicas", [put("pools.0.sharing.replicas", DROP)],
     ["pool 't4dev': sharing: replicas"]),
    ("MPS with one replica", [put("pools.0.sharing", {"mode": "mps", "replicas": 1})],
     ["pool 't4dev': sharing: replicas"]),
    ("replicas on MIG", [put("pools.1.sharing.replicas", 2)],
     ["pool 'a100mig': sharing: replicas"]),
    ("two shares of a time-sliced GPU", [put("profiles.0.gpus", 2)],
     ["profile 't4-shared': gpus"]),
    ("more MIG slices than a node has", [put("jobProfiles.0.pools", ["a100mig"]),
                                         put("jobProfiles.0.gpus", 3)],
     ["job profile 'a100-train': gpus"]),
    ("NAP cannot scale MIG", [put("pools.1.autoscaler", "node-auto-provisioning")],
     ["pool 'a100mig': autoscaler"]),
    # nodes, prices, timeouts
    ("minNodes above maxNodes", [put("pools.3.minNodes", 3)], ["pool 'a100': minNodes"]),
    ("negative price", [put("pools.0.pricePerNodeHour", -0.75)],
     ["pool 't4dev': pricePerNodeHour"]),
    ("price with a currency", [put("pools.1.pricePerNodeHour", "$3.67")],
     ["pool 'a100mig': pricePerNodeHour"]),
    ("price not a number (NaN)", [put("pools.2.pricePerNodeHour", math.nan)],
     ["pool 'a100spot': pricePerNodeHour"]),
    ("idleTimeout zero", [put("profiles.0.idleTimeout", "0s")],
     ["profile 't4-shared': idleTimeout"]),
    ("consolidateAfter beyond a Go duration", [put("pools.0.consolidateAfter", 10**30)],
     ["pool 't4dev': consolidateAfter"]),
    ("maxAge in weeks", [put("profiles.1.maxAge", "2w")], ["profile 'a100-mig-3g': maxAge"]),
    ("startTimeout negative", [put("profiles.4.startTimeout", -60)],
     ["profile 'cpu': startTimeout"]),
    ("cpuIdleTimeout a word", [put("cpuIdleTimeout", "never")], ["spec: cpuIdleTimeout"]),
    ("kernelIdleTimeout zero", [put("profiles.1.kernelIdleTimeout", 0)],
     ["profile 'a100-mig-3g': kernelIdleTimeout"]),
    ("kernelIdleTimeout on a CPU profile", [put("profiles.4.kernelIdleTimeout", "10m")],
     ["profile 'cpu': kernelIdleTimeout"]),
    ("gpuKernelsPerUser a word", [put("gpuKernelsPerUser", "two")], ["spec: gpuKernelsPerUser"]),
    ("gpuIdle threshold 100", [put("profiles.1.gpuIdle.threshold", 100)],
     ["profile 'a100-mig-3g': gpuIdle: threshold"]),
    ("checkpoint grace beyond the spot notice", [put("profiles.3.checkpoint.gracePeriod", "1m")],
     ["profile 'a100-spot': checkpoint: gracePeriod"]),
    ("checkpoint without storage", [put("checkpointStorage", DROP)],
     ["profile 'a100-training': checkpoint", "profile 'a100-spot': checkpoint",
      "job profile 'a100-train': checkpoint", "job profile 'a100-ddp-2': checkpoint"]),
    ("checkpoint storage claim not a name", [put("checkpointStorage.claimName", "Ckpt_1")],
     ["checkpointStorage: claimName"]),
    # job profiles
    ("job with zero pods", [put("jobProfiles.1.pods", 0)], ["job profile 'a100-ddp-2': pods"]),
    ("job retries negative", [put("jobProfiles.0.retries", -1)],
     ["job profile 'a100-train': retries"]),
    ("job maxRunTime a number of hours", [put("jobProfiles.2.maxRunTime", "4 hours")],
     ["job profile 't4-job': maxRunTime"]),
    ("gpuIdle on a job profile", [put("jobProfiles.0.gpuIdle", {"threshold": 5, "window": "1h"})],
     ["job profile 'a100-train': gpuIdle"]),
    ("jobsPerUser a string", [put("jobsPerUser", "two")], ["spec: jobsPerUser"]),
]


def test_the_table_covers_every_kind_of_fault():
    assert len(BROKEN) >= 30
    assert len({name for name, _, _ in BROKEN}) == len(BROKEN)


@pytest.mark.parametrize("name,edits,paths", BROKEN, ids=[row[0] for row in BROKEN])
def test_a_broken_spec_stops_the_hub_naming_the_field(example_spec, tmp_path, name, edits,
                                                      paths):
    spec: Any = example_spec
    for edit in edits:
        spec = edit(spec) or spec
    error = start_hub_config(spec, tmp_path)
    assert sorted(path_text(e) for e in error.errors) == sorted(paths), error.errors


def test_every_error_is_listed_at_once(example_spec, tmp_path):
    """Five faults in five sections: the hub lists all five, not the first."""
    for edit in (put("pools.1.sharing.migProfile", "9g.99gb"), put("teams.1.quota.h100", 2),
                 put("priorities.0.value", "high"), put("profiles.4.cpu", "lots"),
                 put("jobProfiles.0.retries", -1)):
        edit(example_spec)
    error = start_hub_config(example_spec, tmp_path)
    assert [path_text(e) for e in error.errors] == [
        "pool 'a100mig': sharing: migProfile", "priority 'interactive': value",
        "profile 'cpu': cpu", "job profile 'a100-train': retries", "team 'ml-eng': quota"]


def test_the_hub_process_stops_at_start_up_naming_every_field(example_spec, tmp_path):
    """A real ``jupyterhub`` with ``configure_hub`` in its config and a spec with three
    errors exits non-zero before it listens, with every error in its output."""
    for edit in (put("pools.1.sharing.migProfile", "3g.20gb"), put("teams.2.quota.h100", 1),
                 put("jobProfiles.1.pods", 0)):
        edit(example_spec)
    spec = tmp_path / "platform.yaml"
    spec.write_text(yaml.safe_dump(example_spec, sort_keys=False))
    config = tmp_path / "jupyterhub_config.py"
    config.write_text("from jupyterhub_gpu import configure_hub\n"
                      f"configure_hub(get_config(), {str(spec)!r})\n")
    hub = subprocess.run([sys.executable, "-m", "jupyterhub", "-f", str(config),
                          "--ip", "127.0.0.1", "--port", "0"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    output = hub.stdout + hub.stderr
    assert hub.returncode != 0, output
    assert f"{spec} has 3 error(s):" in output, output
    for path in ("pool 'a100mig': sharing: migProfile: ", "team 'experimentation': quota: ",
                 "job profile 'a100-ddp-2': pods: "):
        assert path in output, output
    assert "JupyterHub is now running" not in output
    assert not (tmp_path / "jupyterhub.sqlite").exists()  # stopped before its database


# -- random mutations never crash the parser ------------------------------------------

#: values of every type a YAML document can hold (and YAML's .nan and .inf)
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308, 10**40, 0.5, 2**63, -0.0]),
    st.sampled_from(["0", "", "-1", "1e999", "none", "mig", "t4dev", "a100spot",
                     "interactive", "8Gi", "500m", "30m", "0s", "3g.40gb"]),
    st.dates(), st.lists(st.text(max_size=4), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(-2, 5), max_size=3),
)
KINDS = ("drop", "set", "swap", "duplicate", "add")


def _paths(node: Any, path: tuple = ()) -> list[list]:
    """Every path into the example spec, from the top down to each leaf."""
    children = (node.items() if isinstance(node, dict) else enumerate(node)
                if isinstance(node, list) else ())
    return [list(path)] + [p for k, v in children for p in _paths(v, (*path, k))]


EXAMPLE_PATHS = _paths(yaml.safe_load((Path(__file__).parents[2] / "config" / "platform.yaml")
                                      .read_text()))[1:]
#: somewhere in a spec: a path of the example's (to each of its fields), or numbers that
#: pick the n-th key or item (modulo the count) at each level of whatever spec it is now
PATH = st.one_of(st.sampled_from(EXAMPLE_PATHS), st.lists(st.integers(0, 30), max_size=4))
#: values at the edge of what a field reads (as YAML may write them: .nan, .inf, 1e999)
EDGE = st.sampled_from([math.inf, -math.inf, math.nan, 1e308, 10**40, 2**63, 0.5, -0.0, 0,
                        -1, "", " ", True, None, "1e999", "nan", "inf", "-1Gi", "0.1"])
#: one mutation: its kind, a path (keys, or list indices taken modulo the length, per
#: level), a value for ``set``/``add``, and the other path of a ``swap``; half of them
#: set one of the example's fields to a value at the edge
MUTATION = st.one_of(
    st.tuples(st.sampled_from(KINDS), PATH, JUNK, PATH),
    st.tuples(st.just("set"), st.sampled_from([p for p in EXAMPLE_PATHS if len(p) > 1]),
              EDGE, st.just([])),
)


def _walk(root: Any, path: list) -> tuple[Any, Any]:
    """The container and key ``path`` leads to (stopping early at a leaf)."""
    parent, key = None, None
    node = root
    for step in path:
        if isinstance(node, dict) and (node or isinstance(step, str)):
            k = step if isinstance(step, str) else list(node)[step % len(node)]
        elif isinstance(node, list) and node and isinstance(step, int):
            k = step % len(node)
        else:
            break
        parent, key = node, k
        if isinstance(node, dict) and k not in node:  # a new key (a ``set`` adds it)
            break
        node = node[k]
    return parent, key


def mutate(spec: dict, mutation: tuple) -> None:
    kind, path, value, other = mutation
    parent, key = _walk(spec, list(path))
    if parent is None:
        return
    if isinstance(parent, dict) and key not in parent:
        parent[key] = value
    elif kind == "drop":
        del parent[key]
    elif kind == "set":
        parent[key] = value
    elif kind == "swap":
        parent2, key2 = _walk(spec, list(other))
        if parent2 is not None and not (isinstance(parent2, dict) and key2 not in parent2):
            parent[key], parent2[key2] = parent2[key2], parent[key]
    elif kind == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[key]))
    elif kind == "duplicate" or kind == "add":
        if isinstance(parent, list):
            parent.append(value)
        else:
            parent[f"x{key}" if kind == "add" else key] = value


def _known_place(spec: Any, path: tuple[str, ...]) -> bool:
    """Whether an error's path names something of ``spec``: an item it has (by name
    or index) or a top-level field."""
    top = spec if isinstance(spec, dict) else {}
    m = _ITEM.match(path[0] + ": ") or _INDEXED.match(path[0] + ": ")
    if _CYCLE.match(path[0] + ": "):  # the profiles of a cycle of preferences
        slugs = {i.get("slug") for key in ("profiles", "jobProfiles")
                 for i in (top.get(key) if isinstance(top.get(key), list) else [])
                 if isinstance(i, dict)}
        names = re.findall(_QUOTED, path[0].removeprefix("profiles "))
        return all(eval(n) in slugs for n in names)  # noqa: S307 - reprs of strs
    if m is None:
        return path[0] == "spec" or path[0] in FIELDS["spec"] or path[0] in top
    if "i" in m.groupdict():
        items = top.get(m["list"])
        return isinstance(items, list) and int(m["i"]) < len(items)
    section = _KINDS[m["kind"]]
    key = "slug" if section in ("profile", "jobProfile") else "name"
    items = top.get(PLURAL[section])
    name = eval(m["name"])  # noqa: S307 - the repr of a str the parser wrote
    return isinstance(items, list) and any(
        isinstance(i, dict) and i.get(key) == name for i in items)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=st.lists(MUTATION, min_size=1, max_size=3))
@example(mutations=[("set", ["profiles", 0, "cpu"], math.inf, [])])
@example(mutations=[("set", ["pools", 0, "daemonsetOverhead"], {"cpu": "nan"}, [])])
@example(mutations=[("set", ["jobProfiles", 3, "cpu"], "1e306", [])])
@example(mutations=[("set", ["pools", 2, "pricePerNodeHour"], math.inf, [])])
@example(mutations=[("set", ["profiles", 4, "memory"], 0.5, [])])
@example(mutations=[("swap", ["pools", 0], None, ["teams", 0])])
@example(mutations=[("drop", ["pools", 1, "sharing"], None, [])])
@example(mutations=[("set", ["pools"], {}, [])])
def test_no_mutation_of_the_example_spec_crashes_the_parser(_example_spec_data, mutations):
    spec = copy.deepcopy(_example_spec_data)
    for mutation in mutations:
        mutate(spec, mutation)
    try:
        parse_platform(spec)
    except SpecError as e:
        assert type(e) is SpecError and e.errors
        for error in e.errors:
            path = error_path(error)
            assert path and _known_place(spec, path), (error, mutations)
