"""The 1x model's GPU-kernels mode (issue #32, docs/replay.md "GPU kernels"): the same
trace, each person of a GPU profile working in a CPU server and running every cell
execution in a GPU kernel of their profile.

* **The CPU server** is the person's server on a CPU profile (the first the person's
  groups may use, or ``KernelConfig.cpu_profile``), culled by that profile's rules
  (``cpuIdleTimeout``) on the trace's working periods, on a CPU pool kept warm
  (``warm_cpu_nodes``, billed all week).
* **A GPU kernel** starts at the first execution while none runs: its pod (the
  profile's GPU, CPU and pools) is queued and placed as a server's is (a new node boots,
  billed), and runs ``start_seconds`` after its node is ready (the kernel's start).
* **Executions** run in order in the kernel: each at its trace time, or when the
  kernel is up, or when the one before ends, whichever is last, for its trace length
  (a cell waits for its kernel; nothing is lost but time).
* **Release**: ``kernelIdleTimeout`` after the last execution ended with none since
  (at the culler's next run), or when the CPU server stops; an evicted kernel is not
  started again (the next execution starts a new one).
* **Work done**: the executions' GPU % while their kernel ran, capped at the GPU's
  capacity, as for servers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..spec.model import Platform, Profile
from .model import ModelConfig, ModelResult, _Pod, _pods, _Sim, result, server_segments
from .trace import Session, Trace

#: how long a GPU kernel takes from a place on a ready node to running a cell: its
#: container's start (the image already on the node) and the kernel's launch and
#: connection back to the server. An assumption: measure it on your cluster
KERNEL_START_SECONDS = 30
WORLD = "GPU kernels (1x model)"


@dataclass(frozen=True)
class KernelConfig:
    idle_timeout_seconds: int | None = None  # None: each profile's kernelIdleTimeout
    start_seconds: int = KERNEL_START_SECONDS
    cpu_profile: str | None = None  # None: the first CPU profile the person may use
    warm_cpu_nodes: int = 1  # the CPU pool's nodes kept up all week (minNodes)
    # True: only executions that use the GPU run in the GPU kernel (the person runs the
    # others in a CPU kernel of their server); False: every execution does
    gpu_executions_only: bool = False

    def __post_init__(self):
        if self.idle_timeout_seconds is not None and self.idle_timeout_seconds <= 0:
            raise ValueError("idle_timeout_seconds must be positive")
        if self.start_seconds < 0 or self.warm_cpu_nodes < 0:
            raise ValueError("start_seconds and warm_cpu_nodes must not be negative")


@dataclass(frozen=True)
class KernelResult:
    model: ModelResult
    kernels_started: int
    kernels_released_idle: int  # by kernelIdleTimeout (the rest: their server stopped)
    start_waits: tuple[float, ...]  # seconds, first execution to its kernel running
    executions_lost: int  # not yet run when their kernel went (server stopped, eviction)
    executing_gpu_hours: float = 0.0  # GPUs held by kernels while a cell ran in them


@dataclass(eq=False)
class _Kernels:
    """One session's GPU kernels, one at a time."""

    profile: Profile
    pools: tuple
    timeout: float
    start_delay: float
    pod: _Pod | None = None
    queue: list = field(default_factory=list)  # executions waiting for the kernel
    free_at: float = -math.inf  # when the kernel is done with what it was given
    token: int = 0  # changes with each execution: a stale release is ignored


class _KernelSim(_Sim):
    def __init__(self, platform: Platform, trace: Trace, cfg: ModelConfig):
        super().__init__(platform, trace, cfg)
        self.started_kernels = self.idle_releases = self.lost_executions = 0
        self.start_waits: list[float] = []

    def execution(self, t: float, k: _Kernels, run: tuple[float, float, float]) -> None:
        k.queue.append(run)
        if k.pod is None:
            p = k.profile
            k.pod = _Pod("kernel", p.slug, k.pools, p.units, round(p.cpu * 1000), t,
                         math.inf, busy=[], start_delay=k.start_delay, owner=k)
            k.free_at = -math.inf
            self.started_kernels += 1
            self.pods.append(k.pod)
            self.request(t, k.pod)
        elif k.pod.node is not None:
            self.run_queue(k)

    def placed(self, t: float, pod: _Pod) -> None:
        if pod.owner is not None:
            self.start_waits.append(pod.started - pod.requested)
            self.run_queue(pod.owner)

    def run_queue(self, k: _Kernels) -> None:
        pod = k.pod
        for start, end, gpu in k.queue:
            begin = max(start, pod.started, k.free_at)
            k.free_at = begin + (end - start)
            pod.busy.append((begin, k.free_at, gpu))
        k.queue.clear()
        k.token += 1
        cull = self.cfg.cull_every_seconds
        release = math.ceil((k.free_at + k.timeout) / cull) * cull
        self.at(release, self.idle, k, pod, k.token)

    def idle(self, t: float, k: _Kernels, pod: _Pod, token: int) -> None:
        if k.pod is pod and k.token == token and not k.queue:
            self.idle_releases += 1
            self.stop_kernel(t, k)

    def server_stop(self, t: float, k: _Kernels) -> None:
        if k.pod is not None:
            self.stop_kernel(t, k)

    def stop_kernel(self, t: float, k: _Kernels) -> None:
        pod, k.pod = k.pod, None
        self.lost_executions += len(k.queue)
        k.queue.clear()
        pod.stop = t  # a kernel still waiting for room is not placed any more
        if pod.node is not None:
            self.release(t, pod, t)
            pod.generation += 1
            self.retry(t)

    def evicted(self, t: float, pod: _Pod) -> bool:
        if pod.owner is None:
            return False
        k = pod.owner
        if k.pod is pod:
            k.pod = None
            self.lost_executions += len(k.queue)
            k.queue.clear()
        return True


def kernel_idle_minutes(platform: Platform) -> float:
    """The ``kernelIdleTimeout`` of the spec's GPU profiles, in minutes: one value, or
    a ValueError naming each profile's."""
    values = {p.slug: p.kernel_idle_timeout_seconds for p in platform.profiles
              if platform.uses_gpu(p)}
    if len(set(values.values())) != 1:
        raise ValueError("the GPU profiles' kernelIdleTimeout differ (" + ", ".join(
            f"{slug}: {v} s" for slug, v in values.items()) + "): give one idle timeout")
    return next(iter(values.values())) / 60


def cpu_profile_of(platform: Platform, groups: tuple[str, ...], slug: str | None) -> Profile:
    """The CPU profile a person's server uses in kernels mode."""
    allowed = [p for p in platform.profiles_for(set(groups)) if not platform.uses_gpu(p)]
    chosen = [p for p in allowed if slug is None or p.slug == slug]
    if not chosen:
        raise ValueError(f"no CPU profile {slug or ''} for groups {list(groups)}: GPU "
                         "kernels run from a CPU server".replace("  ", " "))
    return chosen[0]


def _kernel_session(sim: _KernelSim, session: Session, cfg: ModelConfig,
                    kcfg: KernelConfig) -> None:
    """``session``'s CPU server pods, and its executions sent to its kernels."""
    platform, t0 = sim.platform, sim.t0
    person = sim.trace.person(session.user)
    cpu = cpu_profile_of(platform, person.groups, kcfg.cpu_profile)
    gpu = platform.profile(session.profile)
    timeout = kcfg.idle_timeout_seconds or gpu.kernel_idle_timeout_seconds
    k = _Kernels(gpu, platform.pools_of(gpu), timeout, kcfg.start_seconds)
    for start, stop, culled in server_segments(session, cpu, t0, cfg.cull_every_seconds):
        sim.submit(_Pod("session", cpu.slug, platform.pools_of(cpu), cpu.units,
                        round(cpu.cpu * 1000), start, stop, culled=culled))
        sim.at(min(stop, sim.until), sim.server_stop, k)
    for b in session.bursts:
        if kcfg.gpu_executions_only and not b.gpu_percent:
            continue
        run = ((b.start - t0).total_seconds(), (b.end - t0).total_seconds(), b.gpu_percent)
        sim.at(run[0], sim.execution, k, run)


def model_kernels(platform: Platform, trace: Trace, cfg: ModelConfig = ModelConfig(),
                  kcfg: KernelConfig = KernelConfig()) -> KernelResult:
    """``trace`` through the model with GPU kernels for every session of a GPU
    profile (CPU profiles' sessions and the jobs as in :func:`~.model.model`)."""
    if not platform.gpu_kernels_per_user:
        raise ValueError("the spec switches GPU kernels off (gpuKernelsPerUser: 0)")
    sim = _KernelSim(platform, trace, cfg)
    uses_gpu = {s.profile: platform.uses_gpu(platform.profile(s.profile)) for s in trace.sessions}
    gpu_sessions = [s for s in trace.sessions if uses_gpu[s.profile]]
    warm = dict(cfg.warm_nodes)
    if gpu_sessions:
        person = trace.person(gpu_sessions[0].user)
        pool = platform.pools_of(cpu_profile_of(platform, person.groups, kcfg.cpu_profile))[0]
        warm[pool.name] = max(warm.get(pool.name, 0), kcfg.warm_cpu_nodes)
    sim.warm_up(warm)
    others = Trace(trace.header, trace.people,
                   tuple(s for s in trace.sessions if not uses_gpu[s.profile]), trace.jobs)
    for pod in _pods(platform, others, cfg, sim.t0):
        sim.submit(pod)
    for session in gpu_sessions:
        _kernel_session(sim, session, cfg, kcfg)
    sim.run()
    return KernelResult(result(sim, WORLD, culls=sim.idle_releases), sim.started_kernels,
                        sim.idle_releases, tuple(sim.start_waits), sim.lost_executions,
                        _executing(sim) / 3600)


def _executing(sim: _KernelSim) -> float:
    """GPU-seconds held by kernels while one of their executions ran."""
    held = 0.0
    for node in sim.nodes:
        for start, end, pod in node.work if node.pool.has_gpu else ():
            if pod.kind == "kernel":
                share = pod.units / node.pool.units_per_gpu
                held += share * sum(max(0.0, min(end, e) - max(start, s))
                                    for s, e, _ in pod.busy)
    return held
