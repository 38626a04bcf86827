"""Field-level differences between what the spec implies and what a file holds.

Every difference is a :class:`Drift` naming the file, the object in it and the
field, with the expected and the found value -- what ``check-bundle`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

MISSING = type("Missing", (), {"__repr__": lambda self: "<missing>"})()


@dataclass(frozen=True)
class Drift:
    file: str
    obj: str
    field: str
    expected: Any
    found: Any
    hint: str = ""

    def __str__(self) -> str:
        text = (f"{self.file}: {self.obj}: {self.field}: expected {self.expected!r}, "
                f"found {self.found!r}")
        return f"{text} ({self.hint})" if self.hint else text


def _named(items: Any) -> dict[str, Any] | None:
    """A list of mappings each with a unique ``name``, keyed by it; else None."""
    if not isinstance(items, list) or not all(isinstance(i, dict) and "name" in i
                                              for i in items):
        return None
    keyed = {str(i["name"]): i for i in items}
    return keyed if len(keyed) == len(items) else None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def field_diffs(expected: Any, found: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """``(field path, expected, found)`` for every difference, recursively.

    Mappings are compared key by key; lists of named mappings by name (the path
    reads ``flavors[a100mig]``), other lists of mappings of equal length by index;
    anything else as a whole.
    """
    if isinstance(expected, dict) and isinstance(found, dict):
        for key in [*expected, *(k for k in found if k not in expected)]:
            yield from field_diffs(expected.get(key, MISSING), found.get(key, MISSING),
                                   _join(path, str(key)))
        return
    exp_named, found_named = _named(expected), _named(found)
    if exp_named is not None and found_named is not None and expected and found:
        for name in [*exp_named, *(n for n in found_named if n not in exp_named)]:
            yield from field_diffs(exp_named.get(name, MISSING),
                                   found_named.get(name, MISSING), f"{path}[{name}]")
        return
    if (isinstance(expected, list) and isinstance(found, list) and expected != found
            and len(expected) == len(found) and all(isinstance(x, dict) for x in expected)):
        for i, (exp, act) in enumerate(zip(expected, found)):
            yield from field_diffs(exp, act, f"{path}[{i}]")
        return
    if expected != found:
        yield path or "(whole document)", expected, found


def object_id(obj: Any) -> tuple[str, str, str]:
    if not isinstance(obj, dict):
        return ("", "", "")
    meta = obj.get("metadata") or {}
    return (str(obj.get("kind", "")), str(meta.get("namespace") or ""),
            str(meta.get("name", "")))


def object_label(key: tuple[str, str, str]) -> str:
    kind, namespace, name = key
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def compare_objects(file: str, expected: list[dict], found: list[Any]) -> list[Drift]:
    """Objects matched by kind, namespace and name; each compared field by field."""
    found_by_id = {object_id(o): o for o in found if isinstance(o, dict)}
    drifts = []
    for obj in expected:
        key = object_id(obj)
        actual = found_by_id.pop(key, None)
        if actual is None:
            drifts.append(Drift(file, object_label(key), "(object)", "present", "missing"))
            continue
        drifts += [Drift(file, object_label(key), f, e, a) for f, e, a in field_diffs(obj, actual)]
    for key in found_by_id:
        drifts.append(Drift(file, object_label(key), "(object)", "absent",
                            "present", "the spec has no such object"))
    return drifts
