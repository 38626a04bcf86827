"""This pod's GPU use from Prometheus (DCGM exporter metrics), for the status item.

Optional: without ``JUPYTERHUB_GPU_PROMETHEUS_URL`` in the pod's environment (set it
with the z2jh chart's ``singleuser.extraEnv``), or when Prometheus does not answer
within a few seconds, the item says the data are not reachable, and why.

One instant query asks for the pod's series of the utilisation metric and of the
frame buffer (GPU memory) used and free. A series names its pod either by
``exported_pod``/``exported_namespace`` (Prometheus renamed the exporter's labels) or
by ``pod``/``namespace``, as in :mod:`jupyterhub_gpu.cull.prometheus`; the
``exported_`` pair wins. A pod with several GPUs shows the busiest one's use and
the memory of all of them.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Mapping
from urllib.parse import urlencode

from ..contract import (DCGM_ENGINE_ACTIVE, DCGM_FB_FREE, DCGM_FB_USED, DCGM_GPU_UTIL,
                        DCGM_PERCENT_FACTOR, ENV_HOSTNAME, ENV_NAMESPACE,
                        ENV_PROMETHEUS_TOKEN_FILE, ENV_PROMETHEUS_URL)
from .status import GpuUsage, UsageUnavailable

TIMEOUT_SECONDS = 3.0
CACHE_SECONDS = 15.0  # every open tab polls; Prometheus is asked at most this often


def utilization_metric(partitioned: bool) -> tuple[str, float]:
    """The metric and its factor to percent: a MIG instance has no GPU_UTIL of its own."""
    metric = DCGM_ENGINE_ACTIVE if partitioned else DCGM_GPU_UTIL
    return metric, DCGM_PERCENT_FACTOR[metric]


def usage_query(namespace: str, pod: str, partitioned: bool) -> str:
    names = "|".join((utilization_metric(partitioned)[0], DCGM_FB_USED, DCGM_FB_FREE))
    return " or ".join(f'{{__name__=~"{names}",{p}namespace="{namespace}",{p}pod="{pod}"}}'
                       for p in ("exported_", ""))


def parse_usage(body: Any, partitioned: bool) -> GpuUsage | UsageUnavailable:
    """An instant-query answer -> the pod's use (pure)."""
    if not isinstance(body, Mapping) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, Mapping) else None
        return UsageUnavailable(f"Prometheus: {error or 'not a Prometheus API answer'}")
    series = (body.get("data") or {}).get("result") or []
    renamed = [s for s in series if "exported_pod" in (s.get("metric") or {})]
    metric, scale = utilization_metric(partitioned)
    values: dict[str, list[float]] = {}
    for one in renamed or series:
        try:
            value = float(one["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if math.isfinite(value):
            values.setdefault(one["metric"].get("__name__", ""), []).append(value)
    if not values:
        return UsageUnavailable("no DCGM exporter data for this pod in Prometheus")
    used, free = values.get(DCGM_FB_USED), values.get(DCGM_FB_FREE)
    util = values.get(metric)
    return GpuUsage(max(util) * scale if util else None,
                    sum(used) if used else None,
                    sum(used) + sum(free) if used and free else None)


class UsageSource:
    """Asks Prometheus for this pod's GPU use, at most every :data:`CACHE_SECONDS`."""

    def __init__(self, env: Mapping[str, str], partitioned: bool):
        self.url = (env.get(ENV_PROMETHEUS_URL) or "").rstrip("/")
        self.token_file = env.get(ENV_PROMETHEUS_TOKEN_FILE)
        self.namespace, self.pod = env.get(ENV_NAMESPACE, ""), env.get(ENV_HOSTNAME, "")
        self.partitioned = partitioned
        self._last: tuple[float, GpuUsage | UsageUnavailable] | None = None

    def _headers(self) -> dict[str, str]:
        if not self.token_file:
            return {}
        with open(self.token_file) as f:
            return {"Authorization": f"Bearer {f.read().strip()}"}

    async def usage(self) -> GpuUsage | UsageUnavailable:
        if not self.url:
            return UsageUnavailable(f"no Prometheus configured ({ENV_PROMETHEUS_URL})")
        if not (self.namespace and self.pod):
            return UsageUnavailable(f"the pod's name or namespace is unknown "
                                    f"({ENV_HOSTNAME}, {ENV_NAMESPACE})")
        if self._last is not None and time.monotonic() - self._last[0] < CACHE_SECONDS:
            return self._last[1]
        found = await self._ask()
        self._last = (time.monotonic(), found)
        return found

    async def _ask(self) -> GpuUsage | UsageUnavailable:
        from tornado.httpclient import AsyncHTTPClient, HTTPClientError

        query = usage_query(self.namespace, self.pod, self.partitioned)
        url = f"{self.url}/api/v1/query?{urlencode({'query': query})}"
        try:
            response = await AsyncHTTPClient().fetch(
                url, headers=self._headers(), request_timeout=TIMEOUT_SECONDS,
                connect_timeout=TIMEOUT_SECONDS, raise_error=False)
        except (OSError, HTTPClientError) as e:
            return UsageUnavailable(f"Prometheus at {self.url}: {e}")
        if not response.body:
            return UsageUnavailable(f"Prometheus at {self.url}: "
                                    f"{response.error or f'HTTP {response.code}'}")
        try:
            return parse_usage(json.loads(response.body), self.partitioned)
        except ValueError:
            return UsageUnavailable(f"Prometheus at {self.url}: HTTP {response.code}, not JSON")
