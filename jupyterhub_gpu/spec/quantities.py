"""Parsing of Kubernetes quantities and human durations (pure functions)."""

from __future__ import annotations

import math
import re

_MEM_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}
_MEM_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(k|M|G|T|Ki|Mi|Gi|Ti)?$")
_DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_memory(value: object) -> int:
    """``"12Gi"`` -> bytes. Raises ValueError with the accepted forms."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = _MEM_RE.match(str(value).strip())
    n_bytes = int(float(m.group(1)) * _MEM_SUFFIX[m.group(2) or ""]) if m else 0
    if n_bytes < 1:  # also a fraction of a byte, e.g. 0.5
        raise ValueError(f"{value!r} is not a memory size; use e.g. 512Mi, 12Gi or 16G")
    return n_bytes


def format_memory(n_bytes: int) -> str:
    """bytes -> the shortest exact binary quantity, e.g. ``12884901888`` -> ``"12Gi"``."""
    if n_bytes == 0:
        return "0"
    for suffix in ("Ti", "Gi", "Mi", "Ki"):
        if n_bytes % _MEM_SUFFIX[suffix] == 0:
            return f"{n_bytes // _MEM_SUFFIX[suffix]}{suffix}"
    return str(n_bytes)


def parse_cpu(value: object) -> float:
    """``2``, ``"1.5"`` or ``"500m"`` -> cores."""
    text = str(value).strip()
    try:
        cores = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        cores = -1.0
    # not nan, nor so large that its millicores are infinite
    if isinstance(value, bool) or not 0 < cores * 1000 < math.inf:
        raise ValueError(f"{value!r} is not a CPU amount; use e.g. 2, 0.5 or 500m")
    return cores


def format_cpu(cores: float) -> str:
    millis = round(cores * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_duration(seconds: int) -> str:
    """seconds -> the shortest duration that both :func:`parse_duration` and Go (a
    Kubernetes or Karpenter duration field) read back: ``5400`` -> ``"1h30m"``,
    ``0`` -> ``"0s"`` (no days: Go has none)."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return "".join(parts) or "0s"


MAX_DURATION_DAYS = 365
"""The longest duration a spec may give: far above any timeout, and far below what a
Go ``time.Duration`` holds (292 years) in the objects generated from it."""


def parse_duration(value: object, allow_zero: bool = False) -> int:
    """``"30m"``, ``"1h30m"``, ``"90s"`` or a number of seconds -> seconds (> 0, or
    >= 0 with ``allow_zero``: ``"0s"`` or ``0``; at most :data:`MAX_DURATION_DAYS`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    else:
        m = _DURATION_RE.match(str(value).strip())
        if not m or not any(m.groups()):
            raise ValueError(f"{value!r} is not a duration; use e.g. 90s, 30m, 8h or 1h30m")
        d, h, mi, s = (int(g or 0) for g in m.groups())
        seconds = ((d * 24 + h) * 60 + mi) * 60 + s
    if seconds < 0 or (seconds == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{value!r} is not a {kind} duration")
    if seconds > MAX_DURATION_DAYS * 86400:
        raise ValueError(f"{value!r} is longer than {MAX_DURATION_DAYS} days")
    return seconds

