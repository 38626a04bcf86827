"""Utilization of billed GPU-hours per team, from the DCGM exporter's metrics in
Prometheus.

The DCGM exporter reports a sample per GPU and pod only while a pod holds the GPU,
so a team's mean utilization over its samples in the window is the utilization of
the GPU time it was billed for. One instant query answers every team:
:func:`utilization_query` builds it (pure); :func:`parse_utilization` reads the answer.
Without a Prometheus, or when it does not answer, the page says "no GPU telemetry".
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Mapping

from ..contract import DCGM_GPU_UTIL
from ..cull.prometheus import METRICS, PrometheusClient, PrometheusError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Telemetry:
    """Mean GPU utilization (percent) per team namespace; ``error`` when there is none."""

    by_namespace: Mapping[str, float]
    error: str | None = None


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _namespace_matcher(namespaces: tuple[str, ...]) -> str:
    """A label matcher for ``namespaces`` (names, so nothing to escape in the regex)."""
    for n in namespaces:
        if not _NAMESPACE.fullmatch(n):
            raise ValueError(f"not a namespace name: {n!r}")
    return f'namespace=~"{"|".join(sorted(namespaces))}"'


def utilization_query(metric: str, namespaces: tuple[str, ...], window_seconds: int) -> str:
    """Mean of ``metric`` (in percent) per namespace over the last ``window_seconds``,
    over every sample of every GPU of the namespaces' pods.

    E.g. ``sum by (namespace) (sum_over_time(DCGM_FI_DEV_GPU_UTIL{namespace=~"a|b"}[3600s]))
    * 1 / sum by (namespace) (count_over_time(DCGM_FI_DEV_GPU_UTIL{namespace=~"a|b"}[3600s]))``
    """
    if metric not in METRICS:
        raise ValueError(f"unknown GPU metric {metric!r}; valid: {', '.join(METRICS)}")
    if not namespaces or window_seconds <= 0:
        raise ValueError("a utilization query needs namespaces and a positive window")
    selector = f"{metric}{{{_namespace_matcher(namespaces)}}}[{window_seconds}s]"
    factor = METRICS[metric]
    return (f"sum by (namespace) (sum_over_time({selector})) * {factor:g} / "
            f"sum by (namespace) (count_over_time({selector}))")


def parse_utilization(data: Any) -> dict[str, float]:
    """An instant query's ``data`` (a vector) -> namespace: percent."""
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise PrometheusError(f"expected a vector, got {data!r:.200}")
    out = {}
    for item in data.get("result") or []:
        namespace = (item.get("metric") or {}).get("namespace")
        if namespace:
            out[namespace] = float(item["value"][1])
    return out


async def fetch(url: str | None, namespaces: tuple[str, ...], window_seconds: int,
                at: datetime, *, metric: str = DCGM_GPU_UTIL,
                timeout_seconds: float = 5.0) -> Telemetry:
    """The teams' utilization from the Prometheus at ``url`` (None: not configured)."""
    if not url:
        return Telemetry(MappingProxyType({}), "no Prometheus is configured")
    try:
        client = PrometheusClient(url, metric=metric, timeout_seconds=timeout_seconds)
        data = await client.instant(utilization_query(metric, namespaces, window_seconds), at)
        return Telemetry(MappingProxyType(parse_utilization(data)))
    except PrometheusError as e:
        log.warning("No GPU telemetry from %s: %s", url, e)
        return Telemetry(MappingProxyType({}), f"Prometheus did not answer ({e})")
