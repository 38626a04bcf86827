"""The figures of one world -- the VM baseline or the platform -- for the table of
both (:mod:`.report`), and the platform's, computed from the usage ledger's rows
and the GPU nodes' lifetimes (pure functions)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Iterable, Mapping

from ..spec.model import Platform
from ..usage.figures import percentile as nearest_rank
from ..ledger.store import Kind, StopReason, Usage
from .trace import Trace

#: ledger stop reasons counted as a platform taking work away, and as a cull
PREEMPTIONS = frozenset({StopReason.PREEMPTED, StopReason.SPOT_EVICTION, StopReason.EVICTED})
CULLS = frozenset({StopReason.IDLE_CULL, StopReason.MAX_AGE})


@dataclass(frozen=True)
class NodeLifetime:
    """One billed machine: a node of a pool (or, in the baseline, a VM of the
    pool's size), from when it was created to when it was deleted (None: still up)."""

    pool: str
    name: str
    start: datetime
    end: datetime | None = None


@dataclass(frozen=True)
class Figures:
    world: str  # a column title
    gpu_node_hours: float
    cost: float  # every billed node, CPU nodes too, at the spec's prices
    used_gpu_hours: float  # the GPU work the trace asked for that was done
    node_hours_by_pool: Mapping[str, float]
    time_to_notebook: tuple[float, ...]  # seconds, per session that got a server
    queue_waits: Mapping[str, tuple[float, ...]] = field(
        default_factory=lambda: MappingProxyType({}))  # profile slug -> seconds
    culls: int = 0
    preemptions: int = 0
    sessions_without_server: int = 0
    nodes: tuple[NodeLifetime, ...] = ()  # for the plot

    @property
    def utilization(self) -> float | None:
        """Of billed GPU-hours, the share the work kept busy (None: none billed)."""
        return self.used_gpu_hours / self.gpu_node_hours if self.gpu_node_hours else None


def percentile(values: Iterable[float], p: float) -> float | None:
    """The ``p``-th percentile (nearest rank, as the usage page's) of ``values``;
    None if empty."""
    values = list(values)
    return nearest_rank(values, p) if values else None


def _hours(a: datetime, b: datetime) -> float:
    return max(0.0, (b - a).total_seconds() / 3600)


def node_hours(platform: Platform, nodes: Iterable[NodeLifetime], until: datetime
               ) -> tuple[dict[str, float], float, float]:
    """Hours per pool, GPU node-hours (hours times GPUs per node) and cost of
    ``nodes``; a node still up counts until ``until``."""
    by_pool: dict[str, float] = {}
    gpu_hours = cost = 0.0
    for node in nodes:
        pool = platform.pool(node.pool)
        hours = _hours(node.start, min(node.end or until, until))
        by_pool[node.pool] = by_pool.get(node.pool, 0.0) + hours
        gpu_hours += hours * pool.gpus_per_node if pool.has_gpu else 0.0
        cost += hours * pool.price_per_node_hour
    return by_pool, gpu_hours, cost


def _overlap_hours(a0: datetime, a1: datetime, b0: datetime, b1: datetime) -> float:
    return _hours(max(a0, b0), min(a1, b1))


def _merged(spans: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """``spans`` with the overlapping ones joined: a period is in the result once."""
    out: list[tuple[datetime, datetime]] = []
    for start, stop in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out


def _session_work(trace: Trace, rows: list[Usage]) -> float:
    """GPU-hours of the trace's cell executions while one of the user's servers ran
    (counted once however many ran)."""
    until = trace.header.end
    running: dict[str, list[tuple[datetime, datetime]]] = {}
    for r in rows:
        if r.kind == Kind.SESSION and r.running_at is not None:
            running.setdefault(r.user, []).append((r.running_at, r.stopped_at or until))
    used = 0.0
    for s in trace.sessions:
        for b in s.bursts:
            for start, stop in _merged(running.get(s.user, [])):
                used += _overlap_hours(b.start, b.end, start, stop) * b.gpu_percent / 100
    return used


def _job_work(platform: Platform, trace: Trace, rows: list[Usage]) -> float:
    """GPU-hours of the jobs that ran: each row's run time at the GPU utilization of
    the user's trace job submitted nearest to it."""
    used = 0.0
    for r in rows:
        if r.kind != Kind.JOB or r.running_at is None or r.requested_at is None:
            continue
        mine = [j for j in trace.jobs if j.user == r.user and j.profile == r.profile]
        if not mine:
            continue
        job = min(mine, key=lambda j: abs((j.submitted - r.requested_at).total_seconds()))
        pods = getattr(platform.job_profile(r.profile), "pods", 1)
        hours = _hours(r.running_at, r.stopped_at or trace.header.end)
        used += hours * job.gpu_percent / 100 * pods
    return used


def platform_figures(platform: Platform, trace: Trace, rows: Iterable[Usage],
                     nodes: Iterable[NodeLifetime], world: str = "jupyterhub-gpu") -> Figures:
    """The platform's figures for ``trace``, from the usage ledger's ``rows`` and the
    lifetimes of the nodes its pools had, all in the trace's (simulated) time."""
    rows, nodes = list(rows), tuple(nodes)
    by_pool, gpu_hours, cost = node_hours(platform, nodes, trace.header.end)
    sessions = [r for r in rows if r.kind == Kind.SESSION]
    waits: dict[str, list[float]] = {}
    for r in rows:
        if r.queue_wait_seconds is not None and r.profile:
            waits.setdefault(r.profile, []).append(r.queue_wait_seconds)
    return Figures(
        world=world, gpu_node_hours=gpu_hours, cost=cost,
        used_gpu_hours=_session_work(trace, rows) + _job_work(platform, trace, rows),
        node_hours_by_pool=MappingProxyType(by_pool),
        time_to_notebook=tuple((r.running_at - r.requested_at).total_seconds()
                               for r in sessions if r.running_at and r.requested_at),
        queue_waits=MappingProxyType({k: tuple(v) for k, v in sorted(waits.items())}),
        culls=sum(r.stop_reason in CULLS for r in rows),
        preemptions=sum(r.stop_reason in PREEMPTIONS for r in rows),
        sessions_without_server=sum(r.running_at is None for r in sessions),
        nodes=nodes)
