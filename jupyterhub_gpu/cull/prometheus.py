"""GPU utilisation of every notebook pod from Prometheus (DCGM exporter metrics).

One range query per cull cycle covers all pods: the busiest GPU of each pod at every
step of the window, as ``max by (namespace, pod, exported_namespace, exported_pod)``.
A series names its pod either by ``pod``/``namespace`` (the exporter's labels kept,
``honorLabels: true``) or by ``exported_pod``/``exported_namespace`` (Prometheus
renamed them because the scrape target has its own ``pod``/``namespace``,
``honorLabels: false``, the ServiceMonitor default); the ``exported_`` pair wins.

Metrics:

* ``DCGM_FI_DEV_GPU_UTIL`` -- percent of time a kernel ran on the GPU (0-100). Not
  reported per MIG instance.
* ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` -- graphics engine activity ratio (0-1, converted
  to percent); reported per MIG instance, so use it for MIG pools.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp

from ..contract import DCGM_GPU_UTIL, DCGM_PERCENT_FACTOR
from .gpu_window import GpuSeries
from .policy import PodRef

METRICS: Mapping[str, float] = MappingProxyType(DCGM_PERCENT_FACTOR)  # metric -> factor to percent
POD_LABELS = ("namespace", "pod", "exported_namespace", "exported_pod")
MAX_POINTS = 10_000  # Prometheus refuses more than 11,000 points per series


class PrometheusError(Exception):
    """Prometheus could not be asked, or did not answer a usable result."""


def redacted(url: str) -> str:
    """``url`` as it may be shown or logged: ``scheme://host[:port]/path``, without the
    user, password, query and fragment, which may hold credentials."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.scheme or not parts.hostname:
        return "(a URL without scheme://host)"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return urlunsplit((parts.scheme, host + (f":{port}" if port else ""), parts.path, "", ""))


def _secrets(url: str) -> tuple[str, ...]:
    """The parts of ``url`` that :func:`redacted` leaves out, as they may appear in an
    error's text (raw and percent-decoded), longest first."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    found = {s for raw in (userinfo, parts.password or "", parts.query, parts.fragment)
             for s in (raw, unquote(raw)) if s}
    return tuple(sorted(found, key=len, reverse=True))


@dataclass(frozen=True)
class UsageSnapshot:
    """Every pod's GPU utilisation over one range query."""

    end: datetime
    step_seconds: int
    by_pod: Mapping[PodRef, tuple[tuple[float, float], ...]]

    def series(self, pod: PodRef) -> GpuSeries | None:
        points = self.by_pod.get(pod)
        return None if points is None else GpuSeries(self.end, self.step_seconds, points)


def usage_query(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"unknown GPU metric {metric!r}; valid: {', '.join(METRICS)}")
    return f"max by ({', '.join(POD_LABELS)}) ({metric})"


def pod_of(labels: Mapping[str, str]) -> PodRef | None:
    """The notebook pod a series is about (``exported_`` labels first)."""
    for prefix in ("exported_", ""):
        namespace, pod = labels.get(f"{prefix}namespace"), labels.get(f"{prefix}pod")
        if namespace and pod:
            return PodRef(namespace, pod)
    return None


def _points(values: Any, scale: float) -> dict[float, float]:
    points: dict[float, float] = {}
    for stamp, text in values:
        value = float(text) * scale
        if math.isfinite(value):
            points[float(stamp)] = value
    return points


def parse_matrix(body: Any, scale: float) -> dict[PodRef, tuple[tuple[float, float], ...]]:
    """A ``query_range`` answer -> per pod, the max over its series at each step."""
    if not isinstance(body, Mapping) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, Mapping) else None
        raise PrometheusError(f"query failed: {error or 'not a Prometheus API answer'}")
    data = body.get("data") or {}
    if data.get("resultType") != "matrix":
        raise PrometheusError(f"expected a matrix, got {data.get('resultType')!r}")
    merged: dict[PodRef, dict[float, float]] = {}
    for series in data.get("result") or []:
        pod = pod_of(series.get("metric") or {})
        points = _points(series.get("values") or [], scale)
        if pod is None or not points:
            continue
        into = merged.setdefault(pod, {})
        for stamp, value in points.items():
            into[stamp] = max(value, into.get(stamp, value))
    return {pod: tuple(sorted(points.items())) for pod, points in merged.items()}


class PrometheusClient:
    """Asks one Prometheus (HTTP API v1) for GPU utilisation; bounded and timed out."""

    def __init__(self, url: str, *, metric: str = DCGM_GPU_UTIL,
                 step_seconds: int = 60, timeout_seconds: float = 10.0,
                 max_concurrent: int = 2, token_file: str | None = None):
        self.url = url.rstrip("/")
        self.shown_url = redacted(self.url)  # for errors and logs: no credentials
        self._secrets = _secrets(self.url)
        self._parts = urlsplit(self.url)
        self.query = usage_query(metric)
        self.scale = METRICS[metric]
        self.step_seconds = step_seconds
        self.timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self.token_file = token_file  # re-read per query: such tokens rotate
        self._slots = asyncio.Semaphore(max_concurrent)

    def _step(self, window_seconds: int) -> int:
        return max(self.step_seconds, math.ceil(window_seconds / MAX_POINTS))

    async def gpu_usage(self, window_seconds: int, end: datetime) -> UsageSnapshot:
        """All pods' utilisation over ``[end - window, end]``; raises PrometheusError."""
        step = self._step(window_seconds)
        params = {"query": self.query, "step": str(step), "end": f"{end.timestamp():.3f}",
                  "start": f"{(end - timedelta(seconds=window_seconds)).timestamp():.3f}"}
        body = await self._post("/api/v1/query_range", params)
        return UsageSnapshot(end, step, MappingProxyType(parse_matrix(body, self.scale)))

    async def instant(self, query: str, at: datetime) -> Any:
        """The answer (``data``) of instant query ``query`` at ``at``; raises
        PrometheusError."""
        body = await self._post("/api/v1/query", {"query": query, "time": f"{at.timestamp():.3f}"})
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise PrometheusError(f"query failed: {error or 'not a Prometheus API answer'}")
        return body.get("data")

    def _headers(self) -> dict[str, str]:
        if not self.token_file:
            return {}
        try:
            with open(self.token_file) as f:
                return {"Authorization": f"Bearer {f.read().strip()}"}
        except OSError as e:
            raise PrometheusError(f"cannot read the token file: {e}") from e

    async def _post(self, path: str, form: Mapping[str, str]) -> Any:
        async with self._slots:
            try:
                async with aiohttp.ClientSession(timeout=self.timeout,
                                                 headers=self._headers()) as http:
                    async with http.post(self._endpoint(path), data=form) as response:
                        if response.status >= 500 or response.status in (401, 403, 404):
                            raise PrometheusError(f"{self.shown_url}{path}: "
                                                  f"HTTP {response.status}")
                        return await response.json(content_type=None)
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
                raise PrometheusError(f"{self.shown_url}{path}: {type(e).__name__}: "
                                      f"{self._scrubbed(str(e))}") from e

    def _endpoint(self, path: str) -> str:
        """The API ``path`` under the URL's path, keeping the URL's query."""
        p = self._parts
        return urlunsplit((p.scheme, p.netloc, p.path.rstrip("/") + path, p.query, ""))

    def _scrubbed(self, text: str) -> str:
        """``text`` (an error aiohttp raised: some quote the URL) without the URL's
        credentials."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text
