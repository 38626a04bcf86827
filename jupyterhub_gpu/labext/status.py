"""What JupyterLab's GPU status item shows (pure; reads only what it is given).

The notebook pod knows its profile, GPU and cull rules from the environment the
spawner set (:func:`jupyterhub_gpu.builders.pod.profile_env`), its own last activity
(Jupyter Server's), whether its preStop hook has run (the pod is being stopped,
:func:`jupyterhub_gpu.checkpoint.stopping`), why the user's previous server was
stopped (:data:`~jupyterhub_gpu.contract.ENV_LAST_STOP_NOTICE`) and, when a
Prometheus with DCGM exporter metrics is reachable, its GPU's use
(:mod:`.dcgm`), and, in a server with GPU kernels, what they are doing
(:class:`KernelNotes`, which :mod:`jupyterhub_gpu.kernels.states` makes: starting,
where in the queue or the machine's start; ready; released or taken back).
:func:`status` turns that into the item's text, its level (``ok``, ``warning``,
``danger``), the panel's rows and the notifications to show once each; the
TypeScript side only renders them. A GPU kernel's notes never change the level:
they are about a kernel, not this server.

The idle deadline counts from Jupyter Server's own last activity: that is what it
reports to the hub, and the culler's decision (:func:`~jupyterhub_gpu.cull.policy.
should_cull`) is applied to it. An open JupyterLab tab's own requests count as
activity; the status item's polls do not, and stop while the tab is hidden.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

from ..contract import (ENV_COUNT, ENV_CPU_LIMIT, ENV_CULL_WARN_BEFORE, ENV_GPU_UNIT,
                        ENV_LAST_STOP_NOTICE, ENV_MEM_LIMIT, ENV_MEMORY, ENV_MODEL,
                        ENV_PREEMPTIBLE, ENV_PROFILE, ENV_PROFILE_NAME, ENV_SHARING, ENV_TEAM)
from ..cull.notice import CullRules, clock_time, short
from ..cull.policy import Reason
from ..spec.sharing import MODES

DEFAULT_WARN_BEFORE = timedelta(minutes=15)  # as the kernel extension's cell warning
REFRESH_SECONDS = 30  # how often the item asks (while its tab is visible)
KERNEL_STARTING_REFRESH_SECONDS = 5  # how often while a GPU kernel starts
OK, WARNING, DANGER = "ok", "warning", "danger"


def duration_words(seconds: float) -> str:
    """``90`` -> ``"1 minute"``, ``5400`` -> ``"1 hour 30 minutes"``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return "less than a minute"
    minutes = seconds // 60
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        parts = [(days, "day"), (hours, "hour")]
    elif hours:
        parts = [(hours, "hour"), (minutes, "minute")]
    else:
        parts = [(minutes, "minute")]
    return " ".join(f"{n} {word}{'s' if n != 1 else ''}" for n, word in parts if n)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


@dataclass(frozen=True)
class ServerFacts:
    """What the spawner told this server about itself (its environment)."""

    profile: str
    profile_name: str
    gpu_model: str | None  # None: a CPU-only server
    unit: str  # what one unit is: "MIG slice 3g.40gb", "whole GPU", "CPU only"
    count: int
    gpu_memory: str  # one unit's, e.g. "40GB"
    shared: bool  # other servers use the same GPU (its use and memory are theirs too)
    partitioned: bool  # a MIG instance: DCGM reports it on its own
    preemptible: bool
    team: str
    cpu_limit: str | None
    mem_limit_bytes: int | None
    rules: CullRules | None
    warn_before: timedelta
    last_stop_notice: str | None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "ServerFacts | None":
        """None outside a jupyterhub-gpu server (no profile in the environment)."""
        if not env.get(ENV_PROFILE):
            return None
        mode = MODES.get(env.get(ENV_SHARING, ""))
        has_gpu = mode.gpu if mode is not None else bool(env.get(ENV_MODEL))
        warn = _int(env.get(ENV_CULL_WARN_BEFORE))
        return cls(
            profile=env[ENV_PROFILE], profile_name=env.get(ENV_PROFILE_NAME) or env[ENV_PROFILE],
            gpu_model=env.get(ENV_MODEL) if has_gpu else None,
            unit=env.get(ENV_GPU_UNIT, ""), count=_int(env.get(ENV_COUNT)) or 0,
            gpu_memory=env.get(ENV_MEMORY, ""), shared=bool(mode and mode.shared),
            partitioned=bool(mode and mode.partitioned),
            preemptible=env.get(ENV_PREEMPTIBLE) == "true", team=env.get(ENV_TEAM, ""),
            cpu_limit=env.get(ENV_CPU_LIMIT) or None,
            mem_limit_bytes=_int(env.get(ENV_MEM_LIMIT)),
            rules=CullRules.from_env(env),
            warn_before=timedelta(seconds=warn) if warn is not None else DEFAULT_WARN_BEFORE,
            last_stop_notice=env.get(ENV_LAST_STOP_NOTICE) or None)

    @property
    def gpu_words(self) -> str:
        if self.gpu_model is None:
            return "none (CPU only)"
        units = f"{self.count} × " if self.count > 1 else ""
        memory = f", {self.gpu_memory}" if self.gpu_memory else ""
        return f"{units}{self.gpu_model} {self.unit}{memory}".replace("  ", " ")


@dataclass(frozen=True)
class Note:
    """A line of the item's panel, shown once as a notification (an alert)."""

    kind: str  # with ``key``, the alert's id: a notification is shown once per id
    key: str
    type: str  # "info", "warning" or "error" (how the notification looks)
    message: str


@dataclass(frozen=True)
class KernelNotes:
    """What this server's GPU kernels add to the item."""

    notes: tuple[Note, ...]
    label: str | None  # a few words for the status bar (while a kernel starts)
    starting: bool  # some kernel is starting: the item asks more often


@dataclass(frozen=True)
class GpuUsage:
    """The GPU's use now, from DCGM exporter metrics."""

    utilization_percent: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None


@dataclass(frozen=True)
class UsageUnavailable:
    reason: str  # e.g. "no Prometheus configured (JUPYTERHUB_GPU_PROMETHEUS_URL)"


@dataclass(frozen=True)
class NextStop:
    reason: Reason
    at: datetime
    due: bool  # the culler stops the server at its next run


def next_stop(facts: ServerFacts, now: datetime, last_activity: datetime | None) -> NextStop | None:
    """The first stop the culler's own rules foresee, if nothing changes."""
    if facts.rules is None:
        return None
    decision = facts.rules.decide(now, last_activity)
    reason = decision.reason if decision.cull else decision.deadline_reason
    if decision.deadline is None or reason is None:
        return None
    return NextStop(reason, decision.deadline, decision.cull)


def stopping_since(notice: Mapping[str, Any] | None,
                   started: datetime) -> Mapping[str, Any] | None:
    """The preStop hook's notice if it was left after this server started; an older
    one (a run dir that outlived its server) is not about this server."""
    try:
        at = datetime.fromisoformat(notice["at"]) if notice else None
    except (KeyError, TypeError, ValueError):
        return None
    fresh = at is not None and at.tzinfo and at >= started.replace(microsecond=0)  # whole s
    return notice if fresh else None


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f}"


def usage_words(facts: ServerFacts, usage: GpuUsage | UsageUnavailable | None) -> str:
    if isinstance(usage, UsageUnavailable) or usage is None:
        return f"not reachable: {usage.reason}" if usage else "not reachable"
    parts = []
    if usage.utilization_percent is not None:
        parts.append(f"{usage.utilization_percent:.0f}% busy")
    if usage.memory_used_mib is not None and usage.memory_total_mib:
        parts.append(f"{_gib(usage.memory_used_mib)} of {_gib(usage.memory_total_mib)} GB "
                     "memory used")
    scope = (" (the whole GPU, shared with other servers)" if facts.shared
             else " (this MIG slice)" if facts.partitioned else "")
    return (", ".join(parts) + scope) if parts else "no DCGM data for this pod yet"


def _usage_short(usage: GpuUsage | UsageUnavailable | None) -> str | None:
    if not isinstance(usage, GpuUsage) or usage.utilization_percent is None:
        return None
    memory = (f" {_gib(usage.memory_used_mib)}/{_gib(usage.memory_total_mib)} GB"
              if usage.memory_used_mib is not None and usage.memory_total_mib else "")
    return f"{usage.utilization_percent:.0f}%{memory}"


def _stop_words(stop: NextStop, now: datetime) -> str:
    when = f"at {clock_time(stop.at, now)}, in {duration_words((stop.at - now).total_seconds())}"
    if stop.due:
        return "now: the culler stops it at its next run"
    if stop.reason is Reason.IDLE:
        return f"{when} if it stays idle"
    return when


def _alert(kind: str, key: str, message: str) -> dict[str, str]:
    return {"id": f"{kind}:{key}", "type": kind_type(kind), "message": message}


def kind_type(kind: str) -> str:
    return {"stopping": "error", "due": "error", "last-stop": "warning"}.get(kind, "warning")


def _alerts(facts: ServerFacts, now: datetime, stop: NextStop | None,
            stopping: Mapping[str, Any] | None) -> list[dict[str, str]]:
    alerts = []
    if stopping:
        alerts.append(_alert("stopping", str(stopping.get("at")),
                             "This server is being stopped now (preempted, evicted, culled "
                             "or stopped from the hub). Save your work: registered "
                             f"checkpoints get {stopping.get('grace_seconds', '?')} s."))
    elif stop is not None and stop.due:
        alerts.append(_alert("due", f"{stop.reason}:{stop.at.isoformat()}",
                             f"This server is past its {_rule_words(facts, stop.reason)}: "
                             "the culler stops it at its next run. Save your work now."))
    elif stop is not None and stop.at - now <= facts.warn_before:
        alerts.append(_alert(str(stop.reason), stop.at.isoformat(),
                             f"This server stops {_stop_words(stop, now)} "
                             f"({_rule_words(facts, stop.reason)}). Save your work."))
    if facts.last_stop_notice:
        digest = hashlib.sha256(facts.last_stop_notice.encode()).hexdigest()[:12]
        alerts.append(_alert("last-stop", digest, facts.last_stop_notice))
    return alerts


def _rule_words(facts: ServerFacts, reason: Reason) -> str:
    rules = facts.rules
    if reason is Reason.MAX_AGE and rules and rules.max_age_seconds:
        return f"{short(rules.max_age_seconds)} limit"
    if reason is Reason.IDLE and rules:
        return f"{short(rules.idle_timeout_seconds)} idle timeout"
    return "GPU-idle rule"


def _level(alerts: list[dict[str, str]]) -> str:
    types = {a["type"] for a in alerts if not a["id"].startswith("last-stop:")}
    return DANGER if "error" in types else WARNING if types else OK


def _rows(facts: ServerFacts, now: datetime, stop: NextStop | None,
          usage: GpuUsage | UsageUnavailable | None,
          stopping: Mapping[str, Any] | None) -> list[list[str]]:
    rows = [["Profile", f"{facts.profile_name} ({facts.profile})"], ["GPU", facts.gpu_words]]
    if facts.gpu_model is not None:
        rows.append(["GPU use", usage_words(facts, usage)])
    if facts.cpu_limit or facts.mem_limit_bytes:
        memory = (f"{facts.mem_limit_bytes / 2**30:g} GiB memory"
                  if facts.mem_limit_bytes else "")
        rows.append(["CPU and memory", ", ".join(
            p for p in (_cpu_words(facts.cpu_limit), memory) if p)])
    rows.append(["Team", facts.team or "-"])
    rows.append(["Preemptible", "yes: it may be stopped for higher-priority work or a spot "
                 "eviction" if facts.preemptible else "no"])
    rules = facts.rules
    if stopping:
        rows.append(["Stopping", f"since {clock_time(datetime.fromisoformat(stopping['at']), now)}"
                     if isinstance(stopping.get("at"), str) else "now"])
    if stop is not None:
        rows.append(["Next stop", f"{_stop_words(stop, now)} ({_rule_words(facts, stop.reason)})"])
    if rules is not None:
        rows.append(["Idle timeout", f"{duration_words(rules.idle_timeout_seconds)} without "
                     "activity"])
        if rules.max_age_deadline and rules.max_age_seconds:
            rows.append(["Maximum age", f"{duration_words(rules.max_age_seconds)}: stops at "
                         f"{clock_time(rules.max_age_deadline, now)}"])
        if rules.gpu_idle:
            rows.append(["GPU-idle rule", f"stops after "
                         f"{duration_words(rules.gpu_idle.window_seconds)} with the GPU under "
                         f"{rules.gpu_idle.threshold_percent:g}%, even if busy"])
    if facts.last_stop_notice:
        rows.append(["Last server", facts.last_stop_notice])
    return rows


def _cpu_words(limit: str | None) -> str:
    try:
        return f"{float(limit or ''):g} CPU" if limit else ""
    except ValueError:
        return f"{limit} CPU"


def _label(facts: ServerFacts, now: datetime, stop: NextStop | None,
           usage: GpuUsage | UsageUnavailable | None, stopping: Mapping | None) -> str:
    parts = [facts.gpu_model or "CPU only"]
    busy = _usage_short(usage)
    if busy:
        parts.append(busy)
    if stopping:
        parts.append("stopping now")
    elif stop is not None and stop.due:
        parts.append("stopping soon")
    elif stop is not None:
        left = short(max(60, int((stop.at - now).total_seconds()) // 60 * 60))  # as the words
        parts.append(f"idle stop in {left}" if stop.reason is Reason.IDLE else f"stops in {left}")
    return " · ".join(parts)


def status(facts: ServerFacts, now: datetime, last_activity: datetime | None,
           stopping: Mapping[str, Any] | None = None,
           usage: GpuUsage | UsageUnavailable | None = None,
           kernels: KernelNotes | None = None) -> dict[str, Any]:
    """JSON for ``GET /jupyterhub-gpu/api/status``: what the item and its panel show."""
    stop = next_stop(facts, now, last_activity)
    alerts = _alerts(facts, now, stop, stopping)
    level = _level(alerts)
    label = _label(facts, now, stop, usage, stopping)
    if kernels is not None:
        alerts += [{"id": f"{n.kind}:{n.key}", "type": n.type, "message": n.message}
                   for n in kernels.notes]
        label += f" · {kernels.label}" if kernels.label else ""
    starting = kernels is not None and kernels.starting
    return {
        "profile": facts.profile,
        "gpu": facts.gpu_words,
        "level": level,
        "label": label,
        "title": f"{facts.profile_name}: {facts.gpu_words}. Click for details.",
        "rows": _rows(facts, now, stop, usage, stopping),
        "alerts": alerts,
        "next_stop": ({"reason": str(stop.reason), "at": stop.at.isoformat(timespec="seconds"),
                       "in_words": duration_words((stop.at - now).total_seconds()),
                       "due": stop.due} if stop else None),
        "usage": (vars(usage) if isinstance(usage, GpuUsage)
                  else {"unavailable": usage.reason} if usage else None),
        "refresh_seconds": KERNEL_STARTING_REFRESH_SECONDS if starting else REFRESH_SECONDS,
    }
