"""Whether to cull one server: a pure decision with an injectable clock.

The rules, in the order they are checked:

1. **max-age** -- the profile's ``maxAge`` has passed since the server started
   (culls even an active server);
2. **idle** -- no activity for the profile's ``idleTimeout``; a server whose profile is
   not in the spec (a CPU server, or a profile since removed) uses the culler's own
   ``--timeout`` (``inactive_limit``) instead;
3. **gpu-idle** -- the profile has ``gpuIdle`` and Prometheus shows its GPU under the
   threshold for the *whole* window (culls even while a kernel is busy).

Missing or partial GPU data never culls: the decision falls back to rules 1 and 2 and
carries a warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Any, Callable, Mapping

from ..contract import (KUBESPAWNER_STATE_NAMESPACE, KUBESPAWNER_STATE_POD, STATE_POD_UID,
                        STATE_PROFILE)
from ..spec.model import GpuIdle, Platform
from .gpu_window import GpuSeries, GpuState, GpuUnknown, GpuVerdict, gpu_verdict

Clock = Callable[[], datetime]
DEFAULT_WARN_BEFORE = timedelta(minutes=10)


def utcnow() -> datetime:
    """The production clock (timezone-aware UTC)."""
    return datetime.now(timezone.utc)


class Reason(StrEnum):
    MAX_AGE = "max-age"
    IDLE = "idle"
    GPU_IDLE = "gpu-idle"
    ACTIVE = "active"  # not culled: inside every limit


@dataclass(frozen=True)
class CullPolicy:
    """The limits that apply to one server."""

    profile: str | None  # the spec profile's slug; None: not a spec profile
    idle_timeout_seconds: int
    max_age_seconds: int | None = None
    gpu_idle: GpuIdle | None = None

    @property
    def source(self) -> str:
        return f"profile {self.profile}" if self.profile else "culler --timeout"


def policy_for(platform: Platform | None, slug: str | None, inactive_limit: int) -> CullPolicy:
    """The spec profile's limits, or the culler's ``--timeout`` for any other server."""
    profile = platform.profile(slug) if platform is not None and slug else None
    if profile is None:
        return CullPolicy(None, inactive_limit)
    return CullPolicy(profile.slug, profile.idle_timeout_seconds, profile.max_age_seconds,
                      profile.gpu_idle)


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_time(value: Any) -> datetime | None:
    """A JupyterHub ISO-8601 timestamp (naive means UTC), or None."""
    if not isinstance(value, str) or not value:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _profile_of(model: Mapping[str, Any], state: Mapping[str, Any]) -> str | None:
    """The profile that ran (server state), else the one asked for (user_options)."""
    slug = state.get(STATE_PROFILE)
    if not isinstance(slug, str):
        options = model.get("user_options")
        slug = options.get("profile") if isinstance(options, Mapping) else None
    return slug if isinstance(slug, str) and slug else None


@dataclass(frozen=True)
class ServerView:
    """What a decision needs from a JupyterHub REST API server model."""

    full_name: str  # "user/server" ("user/" for the default server)
    started: datetime | None
    last_activity: datetime | None
    profile: str | None
    pod: PodRef | None  # from KubeSpawner's state (needs admin:server_state)
    pod_uid: str | None = None  # from GPUSpawner's state: its usage-ledger row

    @classmethod
    def from_model(cls, model: Mapping[str, Any], user: str = "") -> "ServerView":
        state = model.get("state") if isinstance(model.get("state"), Mapping) else {}
        namespace, name = state.get(KUBESPAWNER_STATE_NAMESPACE), state.get(KUBESPAWNER_STATE_POD)
        pod = PodRef(namespace, name) if namespace and name else None
        full_name = model.get("full_name") or f"{user}/{model.get('name', '')}"
        return cls(full_name, parse_time(model.get("started")),
                   parse_time(model.get("last_activity")), _profile_of(model, state), pod,
                   state.get(STATE_POD_UID))


@dataclass(frozen=True)
class Decision:
    cull: bool
    reason: Reason
    detail: str  # one human line for the log
    deadline: datetime | None = None  # when a rule culls if nothing changes
    warn_at: datetime | None = None  # when to start warning about ``deadline``
    warnings: tuple[str, ...] = ()  # data problems; never a reason to cull
    gpu_state: GpuState | None = None  # None: the GPU-idle rule was not evaluated
    deadline_reason: Reason | None = None  # the rule ``deadline`` belongs to


GpuInput = GpuSeries | GpuUnknown | None


def _fmt(delta: timedelta) -> str:
    return str(timedelta(seconds=round(delta.total_seconds())))


def _gpu(policy: CullPolicy, server: ServerView, gpu: GpuInput) -> GpuVerdict | None:
    if policy.gpu_idle is None or gpu is None:
        return None
    if isinstance(gpu, GpuUnknown):
        return GpuVerdict(gpu.state, gpu.reason)
    return gpu_verdict(policy.gpu_idle, gpu, server.started)


def _limits(policy: CullPolicy, server: ServerView) -> dict[Reason, datetime]:
    limits: dict[Reason, datetime] = {}
    if policy.max_age_seconds and server.started:
        limits[Reason.MAX_AGE] = server.started + timedelta(seconds=policy.max_age_seconds)
    last = server.last_activity or server.started
    if last is not None:
        limits[Reason.IDLE] = last + timedelta(seconds=policy.idle_timeout_seconds)
    return limits


def _why(reason: Reason, policy: CullPolicy, server: ServerView, now: datetime) -> str:
    if reason is Reason.MAX_AGE:
        return (f"running for {_fmt(now - server.started)}, max age "
                f"{_fmt(timedelta(seconds=policy.max_age_seconds))} ({policy.source})")
    last = server.last_activity or server.started
    return (f"inactive for {_fmt(now - last)}, idle timeout "
            f"{_fmt(timedelta(seconds=policy.idle_timeout_seconds))} ({policy.source})")


def should_cull(policy: CullPolicy, server: ServerView, now: datetime, gpu: GpuInput = None,
                warn_before: timedelta = DEFAULT_WARN_BEFORE) -> Decision:
    """Decide for ``server`` at ``now``.

    ``gpu`` is None when GPU-idle culling is off (no Prometheus configured), a
    :class:`GpuUnknown` when the data could not be had, else the pod's series.
    """
    limits = _limits(policy, server)
    for reason in (Reason.MAX_AGE, Reason.IDLE):
        if reason in limits and now >= limits[reason]:
            return Decision(True, reason, _why(reason, policy, server, now), limits[reason],
                            deadline_reason=reason)
    verdict = _gpu(policy, server, gpu)
    state = verdict.state if verdict is not None else None
    if state is GpuState.IDLE:
        return Decision(True, Reason.GPU_IDLE, f"{verdict.detail} ({policy.source})", now,
                        gpu_state=state, deadline_reason=Reason.GPU_IDLE)
    warnings = ()
    if verdict is not None and verdict.data_problem:
        warnings = (f"GPU-idle rule skipped, activity rules only: {verdict.detail}",)
    if verdict is not None and verdict.idle_deadline is not None:
        limits[Reason.GPU_IDLE] = verdict.idle_deadline
    if not limits:
        return Decision(False, Reason.ACTIVE, "no start or activity time", None, None,
                        warnings, state)
    first = min(limits, key=limits.__getitem__)
    deadline = limits[first]
    detail = f"within limits; next: {first} at {deadline.isoformat(timespec='seconds')}"
    return Decision(False, Reason.ACTIVE, detail, deadline, deadline - warn_before, warnings,
                    state, first)

