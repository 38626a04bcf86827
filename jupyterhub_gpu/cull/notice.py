"""What the notebook user is told about culling (pure; reads only a given mapping).

The spawner puts the profile's cull rules into the pod's environment
(:func:`pod_env`, plus :func:`deadline_env` at start, when the hub knows the start
time); inside the pod :class:`CullRules` reads them back, and
:func:`jupyterhub_gpu.cull.policy.should_cull` -- the culler's own decision --
computes the deadlines shown in JupyterLab (:mod:`.lab_notice`), served by
:mod:`.server_ext` and printed in cell output near a hard stop (:mod:`.kernel_ext`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from ..contract import (ENV_GPU_IDLE_THRESHOLD, ENV_GPU_IDLE_WINDOW, ENV_GRACE, ENV_IDLE_TIMEOUT,
                        ENV_MAX_AGE, ENV_MAX_AGE_DEADLINE, ENV_PROFILE)
from ..spec.model import GpuIdle, Profile
from .policy import CullPolicy, Decision, ServerView, parse_time, should_cull

TOAST_LIMIT = 140  # JupyterLab cuts toast messages after 140 characters


def pod_env(profile: Profile) -> dict[str, str]:
    """The profile's cull rules as pod environment (static, for the pod builder)."""
    env = {ENV_IDLE_TIMEOUT: str(profile.idle_timeout_seconds)}
    if profile.max_age_seconds:
        env[ENV_MAX_AGE] = str(profile.max_age_seconds)
    if profile.gpu_idle:
        env[ENV_GPU_IDLE_THRESHOLD] = f"{profile.gpu_idle.threshold_percent:g}"
        env[ENV_GPU_IDLE_WINDOW] = str(profile.gpu_idle.window_seconds)
    if profile.checkpoint.enabled:
        env[ENV_GRACE] = str(profile.checkpoint.grace_period_seconds)
    return env


def deadline_env(profile: Profile, started: datetime) -> dict[str, str]:
    """The hard stop of a server the hub started at ``started`` (tz-aware or UTC)."""
    if not profile.max_age_seconds:
        return {}
    if started.tzinfo is None:  # the hub's ORM times are naive UTC
        started = started.replace(tzinfo=timezone.utc)
    deadline = started + timedelta(seconds=profile.max_age_seconds)
    return {ENV_MAX_AGE_DEADLINE: deadline.isoformat(timespec="seconds")}


@dataclass(frozen=True)
class CullRules:
    """The cull rules of the server this process runs in."""

    profile: str
    idle_timeout_seconds: int
    max_age_seconds: int | None = None
    max_age_deadline: datetime | None = None
    gpu_idle: GpuIdle | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "CullRules | None":
        """None outside a GPU server (no idle timeout in the environment)."""
        try:
            idle = int(env[ENV_IDLE_TIMEOUT])
            max_age = int(env[ENV_MAX_AGE]) if env.get(ENV_MAX_AGE) else None
            gpu = (GpuIdle(float(env[ENV_GPU_IDLE_THRESHOLD]), int(env[ENV_GPU_IDLE_WINDOW]))
                   if env.get(ENV_GPU_IDLE_THRESHOLD) else None)
            deadline = parse_time(env.get(ENV_MAX_AGE_DEADLINE))
        except (KeyError, ValueError):
            return None
        return cls(env.get(ENV_PROFILE, ""), idle, max_age, deadline, gpu)

    def decide(self, now: datetime, last_activity: datetime | None) -> Decision:
        """The culler's decision, as far as the pod can know (no GPU data)."""
        policy = CullPolicy(self.profile or None, self.idle_timeout_seconds,
                            self.max_age_seconds if self.max_age_deadline else None)
        started = (self.max_age_deadline - timedelta(seconds=self.max_age_seconds)
                   if self.max_age_deadline and self.max_age_seconds else None)
        return should_cull(policy, ServerView("", started, last_activity, None, None), now)


def short(seconds: int) -> str:
    """``5400`` -> ``"1h30m"``."""
    h, m = divmod(round(seconds / 60), 60)
    return f"{h}h{m:02d}m".replace("h00m", "h") if h else f"{m}m"


def clock_time(when: datetime, now: datetime) -> str:
    fmt = "%H:%M UTC" if abs(when - now) < timedelta(hours=20) else "%b %d %H:%M UTC"
    return when.astimezone(now.tzinfo).strftime(fmt)


def notice_message(rules: CullRules, now: datetime, checkpoint_problem: str | None = None,
                   limit: int = TOAST_LIMIT) -> str:
    """The toast shown when JupyterLab opens: the rules, the hard stop, a hint.

    Stable for one server (no "in N minutes"), so dismissing it hides it until the
    next server. The most important parts come first and it fits ``limit``."""
    stops = []
    if rules.max_age_deadline and rules.max_age_seconds:
        stops.append(f"at {clock_time(rules.max_age_deadline, now)} "
                     f"({short(rules.max_age_seconds)} limit)")
    stops.append(f"after {short(rules.idle_timeout_seconds)} idle")
    if rules.gpu_idle:
        stops.append(f"after {short(rules.gpu_idle.window_seconds)} with GPU "
                     f"<{rules.gpu_idle.threshold_percent:g}% even if busy")
    parts = [f"Checkpoints will fail: {checkpoint_problem}."] if checkpoint_problem else []
    parts += [f"This server stops {', '.join(stops[:-1])}{' or ' if stops[1:] else ''}"
              f"{stops[-1]}.", "Save work: jupyterhub_gpu.checkpoint"]
    text = ""
    for part in parts:
        candidate = f"{text} {part}".strip()
        if len(candidate) > limit:
            break
        text = candidate
    return text or parts[0][: limit - 1] + "…"


def deadline_warning(rules: CullRules, now: datetime, warn_before: timedelta) -> str | None:
    """Text for cell output when the hard stop (max age) is less than ``warn_before``
    away; None otherwise."""
    deadline = rules.max_age_deadline
    if deadline is None or not now >= deadline - warn_before:
        return None
    left = max(0, round((deadline - now).total_seconds()))
    limit = f" (its {short(rules.max_age_seconds)} limit)" if rules.max_age_seconds else ""
    return (f"jupyterhub-gpu: this server will be stopped at {clock_time(deadline, now)}, "
            f"in {short(left) if left >= 60 else f'{left}s'}{limit}. Save your work now, "
            "e.g. jupyterhub_gpu.checkpoint.save(obj, 'name').")


def status(rules: CullRules, now: datetime, last_activity: datetime | None,
           checkpoint_problem: str | None = None) -> dict[str, Any]:
    """JSON for ``GET /jupyterhub-gpu/api/cull``."""
    decision = rules.decide(now, last_activity)

    def iso(when: datetime | None) -> str | None:
        return when.isoformat(timespec="seconds") if when else None

    return {
        "profile": rules.profile,
        "idle_timeout_seconds": rules.idle_timeout_seconds,
        "max_age_seconds": rules.max_age_seconds,
        "max_age_deadline": iso(rules.max_age_deadline),
        "gpu_idle": ({"threshold_percent": rules.gpu_idle.threshold_percent,
                      "window_seconds": rules.gpu_idle.window_seconds}
                     if rules.gpu_idle else None),
        "last_activity": iso(last_activity),
        "cull_due": decision.cull,
        "next_cull": iso(decision.deadline),
        "next_reason": decision.deadline_reason.value if decision.deadline_reason else None,
        "checkpoint_problem": checkpoint_problem,
        "message": notice_message(rules, now, checkpoint_problem),
    }

