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
from ..cull.prometheus import METRICS, PrometheusClient, PrometheusError, redacted

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Telemetry:
    """Mean GPU utilization (percent) per team namespace; ``error`` when there is none."""

    by_namespace: Mapping[str, float]
    error: str | None = None


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _check_namespaces(namespaces: tuple[str, ...]) -> str:
    """``namespaces`` as a regex alternation (names: nothing to escape)."""
    for n in namespaces:
        if not _NAMESPACE.fullmatch(n):
            raise ValueError(f"not a namespace name: {n!r}")
    return "|".join(sorted(namespaces))


def _per_namespace(func: str, metric: str, alternation: str, window_seconds: int) -> str:
    """``func`` of every series of the pods in the namespaces, summed per namespace.

    The pod's namespace is ``exported_namespace`` when Prometheus scraped the exporter
    with ``honorLabels: false`` (``namespace`` is then the exporter's), else ``namespace``
    (docs/dcgm-exporter.md): the two selectors never match the same series."""
    moved = (f'label_replace({func}({metric}{{exported_namespace=~"{alternation}"}}'
             f'[{window_seconds}s]), "namespace", "$1", "exported_namespace", "(.+)")')
    own = f'{func}({metric}{{namespace=~"{alternation}"}}[{window_seconds}s])'
    return f"sum by (namespace) ({moved} or {own})"


def utilization_query(metric: str, namespaces: tuple[str, ...], window_seconds: int) -> str:
    """Mean of ``metric`` (in percent) per namespace over the last ``window_seconds``,
    over every sample of every GPU of the namespaces' pods: the sum of the samples
    over their count, per namespace."""
    if metric not in METRICS:
        raise ValueError(f"unknown GPU metric {metric!r}; valid: {', '.join(METRICS)}")
    if not namespaces or window_seconds <= 0:
        raise ValueError("a utilization query needs namespaces and a positive window")
    alternation = _check_namespaces(namespaces)
    return (f"{_per_namespace('sum_over_time', metric, alternation, window_seconds)} "
            f"* {METRICS[metric]:g} / "
            f"{_per_namespace('count_over_time', metric, alternation, window_seconds)}")


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
    """The teams' utilization from the Prometheus at ``url`` (None: not configured).
    The error shown on the page and the log line name ``url`` without its credentials
    (:func:`~jupyterhub_gpu.cull.prometheus.redacted`)."""
    if not url:
        return Telemetry(MappingProxyType({}), "no Prometheus is configured")
    try:
        client = PrometheusClient(url, metric=metric, timeout_seconds=timeout_seconds)
        data = await client.instant(utilization_query(metric, namespaces, window_seconds), at)
        return Telemetry(MappingProxyType(parse_utilization(data)))
    except PrometheusError as e:
        log.warning("No GPU telemetry from %s: %s", redacted(url), e)
        return Telemetry(MappingProxyType({}), f"Prometheus did not answer ({e})")
