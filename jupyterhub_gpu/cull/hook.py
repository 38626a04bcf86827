"""The ``cull_arbiter_hook`` for jupyterhub-idle-culler 2.x: per-profile rules.

jupyterhub-idle-culler keeps doing the work -- listing users, skipping pending servers,
stopping servers through the hub API; this hook only answers "cull this one?" with
:func:`jupyterhub_gpu.cull.policy.should_cull` and logs one line per server it culls,
naming the user, server, profile and reason. Load it with the config file next to
this module: ``python -m jupyterhub_idle_culler --config=<.../culler_config.py>``
(the culler's flag is ``--config``; a path that does not exist is silently ignored
by traitlets, and then the culler's default ``--timeout`` rule applies to every
server), or use :func:`jupyterhub_gpu.cull.service.culler_service`.

Settings (environment of the culler service):

``JUPYTERHUB_GPU_PLATFORM_FILE``           the platform spec (required; read again when it
                                           changes, :mod:`jupyterhub_gpu.spec.source`)
``JUPYTERHUB_GPU_PROMETHEUS_URL``          e.g. ``http://prometheus.monitoring:9090``;
                                           unset: no GPU-idle culling
``JUPYTERHUB_GPU_CULL_DRY_RUN``            ``true``: log "would cull", stop nothing
``JUPYTERHUB_GPU_CULL_GPU_METRIC``         ``DCGM_FI_DEV_GPU_UTIL`` (default) or
                                           ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (MIG)
``JUPYTERHUB_GPU_PROMETHEUS_TIMEOUT``      seconds per query (default 10)
``JUPYTERHUB_GPU_PROMETHEUS_TOKEN_FILE``   bearer token for Prometheus, re-read per query
``JUPYTERHUB_GPU_CULLER_METRICS_PORT``     serve the culler's ``/metrics`` on this port
``JUPYTERHUB_GPU_CULL_WARN_BEFORE``        seconds; log that a server will soon be culled
``JUPYTERHUB_GPU_USAGE_DB_URL``            the usage ledger: each cull's reason is recorded
                                           there before the server is stopped

Minimal hub RBAC for the culler service (JupyterHub 2+ scopes)::

    list:users             list the users (the culler's source of servers)
    read:users:activity    users' last_activity
    read:servers           server models: started, last_activity, user_options
    delete:servers         stop servers
    admin:server_state     server state: KubeSpawner's pod_name/namespace (to match
                           the pod's GPU series) and the profile that ran
                           (``gpu_profile``). Without it GPU-idle culling never
                           fires (logged as missing data) and the profile comes from
                           user_options only. Add admin:users only for --cull-users.

Run the culler with ``--max-age=0`` (the default): per-profile ``maxAge`` is applied
here, while the culler's own ``--max-age`` is checked *after* this hook says no and
would stop servers even in dry run. ``--timeout`` is the idle limit of servers that
are not of a spec profile (e.g. CPU servers); set ``--cull-every`` explicitly (its
default, half of ``--timeout``, is far too slow for GPU idle timeouts).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Mapping

from ..contract import (DCGM_ENGINE_ACTIVE, DCGM_GPU_UTIL, ENV_CULL_DRY_RUN, ENV_CULL_GPU_METRIC,
                        ENV_CULL_WARN_BEFORE, ENV_CULLER_METRICS_PORT, ENV_PLATFORM_FILE,
                        ENV_PROMETHEUS_TIMEOUT, ENV_PROMETHEUS_TOKEN_FILE, ENV_PROMETHEUS_URL,
                        ENV_USAGE_DB_URL)
from ..spec.model import Platform
from ..spec.source import SpecMetrics, SpecSource
from .gpu_window import GpuState, GpuUnknown
from .metrics import CullMetrics, serve
from .policy import (DEFAULT_WARN_BEFORE, Clock, CullPolicy, Decision, GpuInput, Reason,
                     ServerView, policy_for, should_cull, utcnow)
from .prometheus import PrometheusClient, PrometheusError, UsageSnapshot, redacted
from ..ledger.store import Kind, Ledger, StopReason, Usage

#: a cull's rule as the usage ledger's stop reason
LEDGER_REASONS = {Reason.MAX_AGE: StopReason.MAX_AGE, Reason.IDLE: StopReason.IDLE_CULL,
                  Reason.GPU_IDLE: StopReason.IDLE_CULL}

#: how long a failed Prometheus query answers the calls after it (jupyterhub-idle-culler
#: calls the hook for one user after another, so a cycle's calls follow at once)
FAILURE_REUSE_SECONDS = 2.0
#: while Prometheus does not answer, the log repeats its warning at most this often
OUTAGE_WARN_EVERY = timedelta(minutes=15)
LOGGER_NAME = "IdleCuller.jupyterhub_gpu"  # under the culler's own (configured) logger
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class HookSettings:
    platform_file: str
    prometheus_url: str | None = None
    dry_run: bool = False
    gpu_metric: str = DCGM_GPU_UTIL
    prometheus_timeout_seconds: float = 10.0
    prometheus_token_file: str | None = None
    metrics_port: int | None = None
    warn_before_seconds: int = int(DEFAULT_WARN_BEFORE.total_seconds())
    usage_db_url: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "HookSettings":
        """Read the ``JUPYTERHUB_GPU_*`` variables; ValueError names a bad one."""
        def get(name: str, parse: Any, default: Any) -> Any:
            raw = env.get(name, "").strip()
            try:
                return parse(raw) if raw else default
            except ValueError as e:
                raise ValueError(f"{name}={raw!r}: {e}") from None
        platform_file = get(ENV_PLATFORM_FILE, str, "")
        if not platform_file:
            raise ValueError(f"{ENV_PLATFORM_FILE} is not set: the culler hook "
                             "needs the GPU platform spec")
        return cls(platform_file, get(ENV_PROMETHEUS_URL, str, None),
                   get(ENV_CULL_DRY_RUN, lambda v: v.lower() in _TRUE, False),
                   get(ENV_CULL_GPU_METRIC, str, cls.gpu_metric),
                   get(ENV_PROMETHEUS_TIMEOUT, float, cls.prometheus_timeout_seconds),
                   get(ENV_PROMETHEUS_TOKEN_FILE, str, None),
                   get(ENV_CULLER_METRICS_PORT, int, None),
                   get(ENV_CULL_WARN_BEFORE, int, cls.warn_before_seconds),
                   get(ENV_USAGE_DB_URL, str, None))


class OutageLog:
    """What the hub's log says while Prometheus does not answer the culler: a warning
    naming the URL and the error when the failures start, again at most every
    :data:`OUTAGE_WARN_EVERY` while they go on (with the time they started and how many
    queries failed), and one line when Prometheus answers again. The culler runs as a
    hub-managed service: its log is the hub's."""

    def __init__(self, log: logging.Logger, every: timedelta = OUTAGE_WARN_EVERY):
        self.log, self.every = log, every
        self.since: datetime | None = None
        self._warned_at: datetime | None = None
        self._failures = 0

    def failed(self, now: datetime, error: PrometheusError) -> None:
        self._failures += 1
        if self.since is None:
            self.since = self._warned_at = now
            self.log.warning("GPU-idle culling skipped this cycle, Prometheus: %s (servers "
                             "with gpuIdle are culled on activity alone until it answers; "
                             "repeated at most every %s)", error, _minutes(self.every))
        elif self._warned_at is not None and now - self._warned_at >= self.every:
            self._warned_at = now
            self.log.warning("GPU-idle culling skipped this cycle, Prometheus: %s (not "
                             "answering since %s, %d failed queries)", error,
                             self.since.isoformat(timespec="seconds"), self._failures)
        else:
            self.log.debug("GPU-idle culling skipped this cycle, Prometheus: %s", error)

    def answered(self) -> None:
        if self.since is not None:
            self.log.warning("Prometheus answers again: GPU-idle culling is back (it did "
                             "not answer from %s, %d failed queries)",
                             self.since.isoformat(timespec="seconds"), self._failures)
        self.since, self._warned_at, self._failures = None, None, 0


def _minutes(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 60:g} min"


class UsageCache:
    """One Prometheus query per cull cycle, shared by every server in the cycle.

    The culler calls the hook for each server within seconds; the first call starts
    the query, the others await the same one, and the answer is reused for
    ``ttl_seconds`` (keep it below ``--cull-every``). A failed query is reused only
    for :data:`FAILURE_REUSE_SECONDS` after it failed -- the rest of its cycle, whose
    calls come one right after another -- so a Prometheus that is back is asked
    again in the next cycle, not a TTL later."""

    def __init__(self, client: PrometheusClient, clock: Clock, log: logging.Logger,
                 ttl_seconds: float = 60.0):
        self.client, self.clock, self.log, self.ttl = client, clock, log, ttl_seconds
        self.outage = OutageLog(log)
        self._task: asyncio.Task | None = None
        self._key: tuple[int, datetime] | None = None
        self._failed_at: datetime | None = None

    async def snapshot(self, window_seconds: int) -> UsageSnapshot | GpuUnknown:
        now = self.clock()
        fresh = (self._key is not None and self._key[0] == window_seconds
                 and (now - self._key[1]).total_seconds() < self.ttl)
        if self._task is None or not fresh or self._failure_over(now):
            self._key = (window_seconds, now)
            self._task = asyncio.ensure_future(self._fetch(window_seconds, now))
        return await asyncio.shield(self._task)

    def _failure_over(self, now: datetime) -> bool:
        """The last query failed, and longer ago than a cycle's calls may reuse it."""
        task = self._task
        if task is None or not task.done():
            return False
        if task.cancelled() or task.exception() is not None:
            return True
        return (isinstance(task.result(), GpuUnknown) and self._failed_at is not None
                and (now - self._failed_at).total_seconds() >= FAILURE_REUSE_SECONDS)

    async def _fetch(self, window_seconds: int, end: datetime) -> UsageSnapshot | GpuUnknown:
        try:
            snapshot = await self.client.gpu_usage(window_seconds, end)
        except PrometheusError as e:
            self._failed_at = self.clock()
            self.outage.failed(self._failed_at, e)
            return GpuUnknown(GpuState.UNAVAILABLE, f"Prometheus unavailable: {e}")
        self.outage.answered()
        self.log.debug("GPU usage of %d pods from Prometheus", len(snapshot.by_pod))
        return snapshot


def longest_gpu_window(platform: Platform) -> int:
    """The longest GPU-idle window of the spec: one query serves every profile."""
    return max((p.gpu_idle.window_seconds for p in platform.profiles if p.gpu_idle), default=0)


def metric_warnings(platform: Platform, metric: str) -> list[str]:
    """What ``metric`` cannot tell about the pools of profiles with ``gpuIdle``."""
    warnings = []
    for profile in (p for p in platform.profiles if p.gpu_idle):
        pool = platform.pool(profile.pool)
        if pool.sharing.mode.partitioned and metric == DCGM_GPU_UTIL:
            warnings.append(f"profile {profile.slug}: pool {pool.name} uses MIG, and "
                            f"{DCGM_GPU_UTIL} is not reported per MIG instance; set "
                            f"{ENV_CULL_GPU_METRIC}={DCGM_ENGINE_ACTIVE}")
        elif pool.sharing.shared:
            warnings.append(f"profile {profile.slug}: pool {pool.name} shares each GPU "
                            f"({pool.sharing.mode}); its utilisation is the whole GPU's, so "
                            "a server is only GPU-idle when every sharer is")
    return warnings


class CullArbiter:
    """``cull_arbiter_hook(inactive, inactive_limit, server) -> bool`` (a coroutine).

    ``inactive`` is not used: the decision reads ``started``/``last_activity`` from
    ``server`` with its own clock, like every other rule; ``inactive_limit`` (the
    culler's ``--timeout``) is the idle limit of servers outside the spec."""

    def __init__(self, spec: SpecSource, *, usage: UsageCache | None = None,
                 dry_run: bool = False, clock: Clock = utcnow, metrics: CullMetrics,
                 warn_before: timedelta = DEFAULT_WARN_BEFORE,
                 log: logging.Logger | None = None, ledger: Ledger | None = None):
        self.spec, self.usage, self.dry_run, self.clock = spec, usage, dry_run, clock
        self.ledger = ledger
        self.metrics, self.warn_before = metrics, warn_before
        self.log = log or logging.getLogger(LOGGER_NAME)

    async def __call__(self, inactive: timedelta | None = None, inactive_limit: int = 0,
                       server: Mapping[str, Any] | None = None, **_: Any) -> bool:
        platform = self.spec.current()
        view = ServerView.from_model(server or {})
        policy = policy_for(platform, view.profile, inactive_limit)
        gpu = await self._gpu(platform, policy, view)
        now = self.clock()
        decision = should_cull(policy, view, now, gpu, self.warn_before)
        self.metrics.record(policy.profile, decision, self.dry_run)
        self._log(view, policy, decision, now)
        cull = decision.cull and not self.dry_run
        if cull:
            await self._record(view, decision.reason)
        return cull

    async def _record(self, view: ServerView, reason: Reason) -> None:
        """The cull's reason on the server's usage-ledger row, before the culler stops
        it (the hub's stop then records the time, and keeps this reason)."""
        if self.ledger is None or view.pod_uid is None or reason not in LEDGER_REASONS:
            return
        try:
            await self.ledger.record(Usage(f"pod:{view.pod_uid}", Kind.SESSION,
                                           stop_reason=LEDGER_REASONS[reason]))
        except Exception as e:  # noqa: BLE001 - the cull goes on
            self.log.error("Could not write the usage ledger: %r", e)

    async def _gpu(self, platform: Platform, policy: CullPolicy, view: ServerView) -> GpuInput:
        if self.usage is None or policy.gpu_idle is None:
            return None
        if view.pod is None:
            return GpuUnknown(GpuState.MISSING, "no pod in the server state (does the "
                              "culler have the admin:server_state scope?)")
        snapshot = await self.usage.snapshot(longest_gpu_window(platform))
        if isinstance(snapshot, GpuUnknown):
            return snapshot
        series = snapshot.series(view.pod)
        if series is None:
            return GpuUnknown(GpuState.MISSING, f"no GPU series for pod {view.pod}")
        return series

    def _log(self, view: ServerView, policy: CullPolicy, decision: Decision,
             now: datetime) -> None:
        user, _, name = view.full_name.partition("/")
        profile = view.profile or "-"
        if view.profile and policy.profile is None:
            profile += " (not in the spec)"
        who = f"user={user} server={name!r} profile={profile}"
        # Prometheus' outage is the cache's warning (rate-limited); a server's own
        # missing or partial data is a warning of its own
        level = logging.INFO if decision.gpu_state is GpuState.UNAVAILABLE else logging.WARNING
        for warning in decision.warnings:
            self.log.log(level, "%s: %s", who, warning)
        if decision.cull:
            verb = "DRY RUN, would cull" if self.dry_run else "Culling"
            self.log.info("%s %s reason=%s: %s", verb, who, decision.reason, decision.detail)
        elif decision.warn_at is not None and now >= decision.warn_at:
            self.log.info("Soon culling %s: %s", who, decision.detail)
        else:
            self.log.debug("Not culling %s: %s", who, decision.detail)


def make_arbiter(settings: HookSettings, *, clock: Clock = utcnow,
                 metrics: CullMetrics | None = None) -> CullArbiter:
    """The hook for ``settings``; logs what it will do and serves metrics if asked."""
    log = logging.getLogger(LOGGER_NAME)
    metrics = metrics or CullMetrics()
    spec = SpecSource(settings.platform_file, log, SpecMetrics.of(metrics.registry))
    usage = None
    if settings.prometheus_url:
        client = PrometheusClient(settings.prometheus_url, metric=settings.gpu_metric,
                                  timeout_seconds=settings.prometheus_timeout_seconds,
                                  token_file=settings.prometheus_token_file)
        usage = UsageCache(client, clock, log)
        for warning in metric_warnings(spec.current(), settings.gpu_metric):
            log.warning("GPU-idle culling: %s", warning)
    elif longest_gpu_window(spec.current()):
        log.warning("Profiles have gpuIdle but %s is not set: no GPU-idle culling, only "
                    "idle timeouts and max age", ENV_PROMETHEUS_URL)
    if settings.metrics_port:
        serve(settings.metrics_port, metrics.registry)
    log.info("GPU cull rules from %s%s%s", settings.platform_file,
             f", GPU usage from {redacted(settings.prometheus_url)}" if usage else "",
             ", DRY RUN: nothing will be stopped" if settings.dry_run else "")
    return CullArbiter(spec, usage=usage, dry_run=settings.dry_run, clock=clock,
                       metrics=metrics, log=log,
                       warn_before=timedelta(seconds=settings.warn_before_seconds),
                       ledger=Ledger(settings.usage_db_url) if settings.usage_db_url else None)


def arbiter_from_env(env: Mapping[str, str] | None = None) -> CullArbiter:
    """The arbiter configured by ``JUPYTERHUB_GPU_*`` environment variables."""
    return make_arbiter(HookSettings.from_env(os.environ if env is None else env))


def hook_from_env(env: Mapping[str, str] | None = None) -> Callable[..., Awaitable[bool]]:
    """``c.IdleCuller.cull_arbiter_hook`` from the environment: a plain function, as
    traitlets deep-copies config values (functions are copied by reference)."""
    arbiter = arbiter_from_env(env)

    async def cull_arbiter_hook(**kwargs: Any) -> bool:
        return await arbiter(**kwargs)

    return cull_arbiter_hook
