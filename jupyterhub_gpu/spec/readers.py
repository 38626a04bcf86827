"""The readers of the spec's field values: each takes a YAML value and returns it
typed, or raises a ValueError that says what is wrong (the parser adds the item and
the field). Each field names its reader where it is declared
(:func:`jupyterhub_gpu.spec.keys.key`)."""

from __future__ import annotations

import math
import re
from types import MappingProxyType
from typing import Any, Callable, Mapping

from . import quantities as q

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
POOL_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
ACR_NAME = re.compile(r"^[a-z0-9]{5,50}$")


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


def read_percent(v: Any) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < 100:
        raise ValueError(f"must be a percentage between 0 and 100 (exclusive), got {v!r}")
    return float(v)


def read_ratio(v: Any) -> float:
    value = read_number(v)
    if value > 1:
        raise ValueError(f"must be a ratio from 0 to 1 (0.2 is 20%), got {v!r}")
    return value


def read_duration_or_zero(v: Any) -> int:
    return q.parse_duration(v, allow_zero=True)


def or_zero(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse``, but also accepting 0 (a pool without daemonsets)."""
    def parse_or_zero(v: Any) -> Any:
        return 0 if not isinstance(v, bool) and str(v).strip() in ("0", "0.0") else parse(v)
    return parse_or_zero


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


def read_pool_list(v: Any) -> tuple[str, ...]:
    names = read_names(v)
    if not names:
        raise ValueError("must name at least one pool, the preferred first")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"names pool(s) {', '.join(map(repr, twice))} more than once")
    return names


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
