"""A 1x model of the platform: the same trace, at the speed it happened, through the
platform's rules, in pure Python and in well under a second (docs/replay.md, "The
1x model"). It is a model, not the replay: what it leaves out is listed there.

* **The culler**: a server stops ``idleTimeout`` after its user's last activity, at
  ``maxAge``, or when its GPU stayed under ``gpuIdle``'s threshold for its window,
  each at the culler's next run (every 60 s); a person whose server was culled starts
  it again at their next working period (as the replay's people do); a session that is
  not ``abandoned`` is stopped by its user at its end.
* **Packing**: a pod goes to a node of the first of its profile's pools that has room
  (GPU units and CPU), the fullest first (the user-scheduler packs), else to a new
  node of that pool while it is under ``maxNodes``, else to the next pool; else it
  waits for room.
* **Node lifetimes**: a node is billed from its creation, so its boot (``bootTime``)
  is billed while its first pod waits; a node that has been empty for the pool's
  ``consolidateAfter`` plus Karpenter's own disruption delays is removed
  (``empty_node_seconds`` overrides both, e.g. to match a replay).
* **Spot evictions**: each spot node is evicted after an exponential time at
  ``spot_evictions_per_hour``; as on AKS the node goes, its pods are started again
  elsewhere, and each loses the work since its last checkpoint (uniform up to
  ``checkpoint_interval_seconds``): a job runs that much longer, a notebook's work
  is lost.
* **Work done**: the trace's cell executions (and jobs' run times) while their pod ran,
  times their GPU %, with the pods on one GPU capped at the GPU's capacity.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Mapping

from ..spec.allocatable import node_resources
from ..spec.model import Platform, Pool
from . import prices
from .figures import Figures, NodeLifetime, node_hours
from .schedule import CULL_EVERY
from .trace import Session, Trace

#: Karpenter's disruption controller polls every 10 s and validates a consolidation
#: for 15 s before it acts (pollingPeriod, commandValidationDelay in Karpenter
#: v1.14.1): an empty node lives this much longer than ``consolidateAfter``
KARPENTER_DISRUPTION_SECONDS = 10 + 15
WORLD = "jupyterhub-gpu (1x model)"


@dataclass(frozen=True)
class ModelConfig:
    empty_node_seconds: int | None = None  # None: consolidateAfter + Karpenter's delays
    spot_evictions_per_hour: float = 0.0
    checkpoint_interval_seconds: int = prices.CHECKPOINT_INTERVAL_SECONDS
    seed: int = 0  # the evictions' draws
    cull_every_seconds: int = CULL_EVERY
    # pool name -> nodes kept up all week besides the spec's minNodes (a warm pool)
    warm_nodes: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self):
        if self.empty_node_seconds is not None and self.empty_node_seconds < 0:
            raise ValueError("empty_node_seconds must not be negative")
        if not 0 <= self.spot_evictions_per_hour <= 1:
            raise ValueError(f"spot_evictions_per_hour {self.spot_evictions_per_hour} is "
                             "not a chance from 0 to 1")
        if self.checkpoint_interval_seconds < 0 or self.cull_every_seconds <= 0:
            raise ValueError("checkpoint_interval_seconds must not be negative, "
                             "cull_every_seconds must be positive")


@dataclass(frozen=True)
class ModelResult:
    figures: Figures
    evictions: int
    lost_gpu_hours: float  # work done since a checkpoint, lost to an eviction
    held_gpu_hours: float = 0.0  # GPUs (a share counted as its part) held by pods


def server_segments(session: Session, profile, t0: datetime, cull_every: int
                    ) -> list[tuple[float, float, bool]]:
    """When ``session``'s server runs, in seconds from ``t0``: (start, stop, culled)
    for each time it is started (again after a cull). Its working periods are
    activity; its GPU is busy (for ``gpuIdle``) only in the cell executions at or over
    the threshold."""
    def s(at: datetime) -> float:
        return (at - t0).total_seconds()

    def tick(x: float) -> float:
        return math.ceil(x / cull_every) * cull_every

    idle, max_age, gpu_idle = (profile.idle_timeout_seconds, profile.max_age_seconds,
                               profile.gpu_idle)
    segments = []
    seg = act = gpu = s(session.start)

    def off(busy: bool = False, gpu_busy: bool = False) -> float:
        """When the culler stops the server if nothing changes from now."""
        cuts = [] if busy else [act + idle]
        if max_age:
            cuts.append(seg + max_age)
        if gpu_idle and not gpu_busy:
            cuts.append(gpu + gpu_idle.window_seconds)
        return tick(min(cuts)) if cuts else math.inf

    def culled_until(t: float, gpu_busy: bool = False) -> None:
        """Its person at work until ``t``: each cull meanwhile, and the start again."""
        nonlocal seg, act, gpu
        while (cut := off(True, gpu_busy)) < t:
            segments.append((seg, cut, True))
            seg = act = gpu = cut

    for b in session.busy:
        a, e = s(b.start), s(b.end)
        if a >= off():  # culled in the gap before it: started again now
            segments.append((seg, off(), True))
            seg = act = gpu = a
        for x in b.bursts if gpu_idle else ():
            if x.gpu_percent >= gpu_idle.threshold_percent:
                culled_until(s(x.start))
                culled_until(s(x.end), gpu_busy=True)
                gpu = max(gpu, s(x.end))
        culled_until(e)
        act = e
    stop, end = off(), s(session.end)
    segments.append((seg, end, False) if not session.abandoned and end < stop
                    else (seg, stop, True))
    return segments


@dataclass(eq=False)
class _Node:
    pool: Pool
    name: str
    created: float
    ready: float
    units: int
    cpu: int
    pods: set = field(default_factory=set)
    end: float | None = None
    token: int = 0  # changes whenever a pod arrives: a stale removal is ignored
    work: list = field(default_factory=list)  # (start, end, pod) while a pod ran
    warm: bool = False  # one of the pool's minimum nodes: never removed


@dataclass(eq=False)
class _Pod:
    kind: str  # "session", "job" or "kernel"
    profile: str
    pools: tuple[Pool, ...]
    units: int
    cpu: int
    requested: float
    stop: float | None  # a session's: when it is stopped
    run: float = 0.0  # a job's run time still to do
    gpu_percent: float = 0.0
    busy: tuple | list = ()  # its cell executions, seconds: (start, end, gpu %)
    culled: bool = False
    node: _Node | None = None
    started: float | None = None
    generation: int = 0
    first_wait: float | None = None  # request to running, the first time it ran
    queue_wait: float | None = None  # request to a place on a node, the first time
    start_delay: float = 0.0  # from its node's readiness to running (a kernel's start)
    owner: object = None  # a kernel's session (kernels.py)


class _Sim:
    def __init__(self, platform: Platform, trace: Trace, cfg: ModelConfig):
        self.platform, self.trace, self.cfg = platform, trace, cfg
        self.t0 = trace.header.start
        self.until = (trace.header.end - self.t0).total_seconds()
        self.rng = random.Random(cfg.seed)
        self.events: list = []
        self.seq = 0
        self.nodes: list[_Node] = []
        self.pending: list[_Pod] = []
        self.pods: list[_Pod] = []
        self.evictions = 0
        self.lost_gpu_hours = 0.0

    def at(self, t: float, fn, *args) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, fn, args))

    def run(self) -> None:
        while self.events:
            t, _, fn, args = heapq.heappop(self.events)
            fn(t, *args)

    # --- placement --------------------------------------------------------------
    def request(self, t: float, pod: _Pod) -> None:
        if not self.place(t, pod):
            self.pending.append(pod)

    def place(self, t: float, pod: _Pod) -> bool:
        if pod.stop is not None and pod.stop <= t:
            return True  # stopped before it found room: nothing to place
        for pool in pod.pools:
            alive = [n for n in self.nodes if n.pool is pool and n.end is None]
            fits = [n for n in alive if n.units >= pod.units and n.cpu >= pod.cpu]
            if fits:
                self.assign(t, pod, min(fits, key=lambda n: (n.units, n.cpu, n.created)))
                return True
            if len(alive) < pool.max_nodes:
                self.assign(t, pod, self.new_node(t, pool))
                return True
        return False

    def new_node(self, t: float, pool: Pool) -> _Node:
        node = _Node(pool, f"{pool.name}-{len(self.nodes)}", t, t + pool.boot_seconds,
                     pool.units_per_node, node_resources(pool).pods_cpu_millis)
        self.nodes.append(node)
        if pool.spot and self.cfg.spot_evictions_per_hour > 0:
            self.at(t + self.rng.expovariate(self.cfg.spot_evictions_per_hour / 3600),
                    self.evict, node)
        return node

    def assign(self, t: float, pod: _Pod, node: _Node) -> None:
        node.units -= pod.units
        node.cpu -= pod.cpu
        node.pods.add(pod)
        node.token += 1
        pod.node, pod.started = node, max(t, node.ready) + pod.start_delay
        if pod.queue_wait is None:
            pod.queue_wait = t - pod.requested
        if pod.first_wait is None and (pod.stop is None or pod.started < pod.stop):
            pod.first_wait = pod.started - pod.requested
        end = pod.started + pod.run if pod.kind == "job" else max(pod.stop, pod.started)
        self.at(min(end, self.until) if end > t else t, self.finish, pod, pod.generation)
        self.placed(t, pod)

    def placed(self, t: float, pod: _Pod) -> None:
        """``pod`` has a node and a start time (the kernels' model acts on it)."""

    def release(self, t: float, pod: _Pod, worked_until: float) -> None:
        node = pod.node
        if worked_until > pod.started:
            node.work.append((pod.started, worked_until, pod))
        node.units += pod.units
        node.cpu += pod.cpu
        node.pods.discard(pod)
        pod.node = None
        if not node.pods and node.end is None and not node.warm:
            self.at(t + self.empty_seconds(node.pool), self.remove, node, node.token)

    def empty_seconds(self, pool: Pool) -> float:
        if self.cfg.empty_node_seconds is not None:
            return self.cfg.empty_node_seconds
        return pool.consolidate_after_seconds + KARPENTER_DISRUPTION_SECONDS

    def submit(self, pod: _Pod) -> None:
        """``pod`` is asked for at its ``requested`` time (if within the week)."""
        if pod.requested < self.until:
            self.pods.append(pod)
            self.at(pod.requested, self.request, pod)

    def retry(self, t: float) -> None:
        waiting, self.pending = self.pending, []
        for pod in waiting:
            self.request(t, pod)

    # --- events -----------------------------------------------------------------
    def finish(self, t: float, pod: _Pod, generation: int) -> None:
        if generation != pod.generation or pod.node is None:
            return
        self.release(t, pod, t)
        self.retry(t)

    def remove(self, t: float, node: _Node, token: int) -> None:
        if node.end is None and not node.pods and node.token == token:
            node.end = t
            self.retry(t)

    def evict(self, t: float, node: _Node) -> None:
        if node.end is not None or t >= self.until:
            return
        self.evictions += 1
        node.end = t
        for pod in list(node.pods):
            ran = max(0.0, t - pod.started)
            lost = min(ran, self.rng.uniform(0, self.cfg.checkpoint_interval_seconds))
            self.lost_gpu_hours += self.work_of(pod, t - lost, t) / 3600
            self.release(t, pod, t - lost)
            if pod.kind == "job":
                pod.run -= ran - lost
            pod.generation += 1
            pod.requested = t
            if not self.evicted(t, pod):
                self.request(t, pod)

    def evicted(self, t: float, pod: _Pod) -> bool:
        """True if ``pod``, evicted, is not started again (a kernel is not)."""
        return False

    # --- accounting -------------------------------------------------------------
    def work_of(self, pod: _Pod, a: float, b: float) -> float:
        """GPU-seconds ``pod`` asked for in [a, b)."""
        if pod.kind == "job":
            return max(0.0, b - a) * pod.gpu_percent / 100
        return sum(max(0.0, min(b, e) - max(a, s)) * g / 100 for s, e, g in pod.busy)

    def warm_up(self, warm: dict[str, int]) -> None:
        """Each pool's minimum nodes, up (and billed) from the start: the spec's
        ``minNodes``, or more from ``warm`` (pool name -> nodes)."""
        for pool in self.platform.pools:
            for _ in range(max(pool.min_nodes, warm.get(pool.name, 0))):
                node = self.new_node(-pool.boot_seconds, pool)
                node.created, node.warm = 0.0, True


def _capped_work(node: _Node) -> float:
    """GPU-seconds done on ``node``: what its pods asked for, never more at once than
    its GPUs can do."""
    if not node.pool.has_gpu:
        return 0.0
    changes: dict[float, float] = {}
    for start, end, pod in node.work:
        spans = ([(start, end, pod.gpu_percent)] if pod.kind == "job" else
                 [(max(start, s), min(end, e), g) for s, e, g in pod.busy])
        for a, b, g in spans:
            if b > a and g > 0:
                changes[a] = changes.get(a, 0.0) + g / 100
                changes[b] = changes.get(b, 0.0) - g / 100
    done, level, last = 0.0, 0.0, None
    cap = node.pool.gpus_per_node
    for at in sorted(changes):
        if last is not None:
            done += min(level, cap) * (at - last)
        level, last = level + changes[at], at
    return done


def _pods(platform: Platform, trace: Trace, cfg: ModelConfig, t0: datetime) -> list[_Pod]:
    pods = []
    for session in trace.sessions:
        profile = platform.profile(session.profile)
        busy = tuple(((b.start - t0).total_seconds(), (b.end - t0).total_seconds(),
                      b.gpu_percent) for b in session.bursts)
        for start, stop, culled in server_segments(session, profile, t0,
                                                   cfg.cull_every_seconds):
            pods.append(_Pod("session", profile.slug, platform.pools_of(profile),
                             profile.units, round(profile.cpu * 1000), start, stop,
                             busy=busy, culled=culled))
    for job in trace.jobs:
        profile = platform.job_profile(job.profile)
        for _ in range(profile.pods):
            pods.append(_Pod("job", profile.slug, platform.pools_of(profile), profile.units,
                             round(profile.cpu * 1000),
                             (job.submitted - t0).total_seconds(), None,
                             run=float(job.run_seconds), gpu_percent=job.gpu_percent))
    return pods


def model(platform: Platform, trace: Trace, cfg: ModelConfig = ModelConfig()) -> ModelResult:
    """``trace`` through the model of the platform (``cfg``); the trace must agree
    with the spec (:func:`~.trace.check_against`)."""
    sim = _Sim(platform, trace, cfg)
    sim.warm_up(dict(cfg.warm_nodes))
    for pod in _pods(platform, trace, cfg, sim.t0):
        sim.submit(pod)
    sim.run()
    return result(sim, WORLD)


def result(sim: _Sim, world: str, culls: int = 0) -> ModelResult:
    """The figures of a finished ``sim`` (``culls``: idle shutdowns besides the
    servers' culls)."""
    platform, trace, t0 = sim.platform, sim.trace, sim.t0
    when = lambda s: t0 + timedelta(seconds=s)  # noqa: E731
    nodes = tuple(NodeLifetime(n.pool.name, n.name, when(n.created),
                               when(min(n.end if n.end is not None else sim.until,
                                        sim.until)))
                  for n in sim.nodes)
    by_pool, gpu_hours, cost = node_hours(platform, nodes, trace.header.end)
    sessions = [p for p in sim.pods if p.kind == "session"]
    waits: dict[str, list[float]] = {}
    for p in sim.pods:
        if p.queue_wait is not None:
            waits.setdefault(p.profile, []).append(p.queue_wait)
    figures = Figures(
        world=world, gpu_node_hours=gpu_hours, cost=cost,
        used_gpu_hours=sum(_capped_work(n) for n in sim.nodes) / 3600,
        node_hours_by_pool=MappingProxyType(by_pool),
        time_to_notebook=tuple(p.first_wait for p in sessions if p.first_wait is not None),
        queue_waits=MappingProxyType({k: tuple(v) for k, v in sorted(waits.items())}),
        culls=sum(p.culled for p in sessions) + culls, preemptions=sim.evictions,
        sessions_without_server=sum(p.first_wait is None for p in sessions), nodes=nodes)
    held = sum((end - start) * pod.units / n.pool.units_per_gpu
               for n in sim.nodes if n.pool.has_gpu for start, end, pod in n.work)
    return ModelResult(figures, sim.evictions, sim.lost_gpu_hours, held / 3600)
