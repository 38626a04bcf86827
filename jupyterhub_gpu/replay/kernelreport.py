"""``replay model --kernels``: GPU kernels against GPU servers and VMs with the same idle
rule, over many generated weeks, and the sensitivity of the comparison to the kernel
idle timeout and the burst distribution (docs/outcome.md, "GPU kernels").

Each week, one idle timeout ``T`` for all three worlds: VMs that shut down ``T`` after
their person's last activity (at least 15 minutes, Azure ML's least), GPU servers culled
``T`` after it (every GPU profile's ``idleTimeout`` set to ``T``), GPU kernels released
``T`` after their last execution (``kernelIdleTimeout``), from CPU servers on a warm CPU
pool. "GPU cost" is the GPU pools' (or GPU VMs') node-hours at their prices; "every
cost" adds the CPU pools and the fixed costs of :mod:`.costs`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..spec.model import Platform
from .baseline import IDLE_SHUTDOWN_MINUTES, BaselineConfig, baseline
from .bursts import BurstModel
from .costs import Bundle, platform_fixed, vm_fixed
from .figures import Figures, percentile
from .generate import GeneratorConfig, generate
from .intervals import BASE_EVICTIONS, Scenario, quantile, spec_for
from .kernels import KernelConfig, kernel_idle_minutes, model_kernels
from .model import ModelConfig, model

WORLDS = ("VMs", "GPU servers", "GPU kernels")
#: the issue's targets: utilization of billed GPU-hours, GPU cost against the VMs'
TARGET_UTILIZATION = 0.70
TARGET_COST_SHARE = 0.50


@dataclass(frozen=True)
class KernelScenario:
    label: str
    # T: the kernel idle timeout, and the others' idle rule (None: the spec's
    # kernelIdleTimeout, the same on every GPU profile)
    idle_minutes: float | None = None
    bursts: BurstModel = field(default_factory=BurstModel)
    jobs: bool = True  # False: the notebooks alone (the trace's jobs left out)
    cpu_idle_minutes: int | None = None  # the CPU profiles' idle timeout (None: the spec's)
    gpu_executions_only: bool = False  # executions without a GPU run in a CPU kernel


@dataclass(frozen=True)
class World:
    gpu_node_hours: float
    gpu_cost: float
    every_cost: float
    utilization: float


@dataclass(frozen=True)
class KernelWeek:
    worlds: Mapping[str, World]  # WORLDS -> World
    kernel_starts: int
    start_waits: tuple[float, ...]
    # the kernels' utilization, factored: work / GPU held while executing (the GPU %
    # of the executions), executing / held (the idle tail), held / billed (packing,
    # boots, empty nodes); the jobs' GPU-hours are left out of all three
    use_while_executing: float = 0.0
    executing_share: float = 0.0
    held_share: float = 0.0


def scenarios() -> list[KernelScenario]:
    """The base case, then one knob changed in each."""
    base = BurstModel()
    return [
        KernelScenario("base: T = kernelIdleTimeout, bursts as cited"),
        KernelScenario("notebooks only (no training jobs)", jobs=False),
        KernelScenario("CPU servers culled after 30 min idle (not 4 h)", cpu_idle_minutes=30),
        KernelScenario("T 5 min (VMs 15)", idle_minutes=5),
        KernelScenario("T 30 min", idle_minutes=30),
        KernelScenario("T 60 min", idle_minutes=60),
        KernelScenario("executions half as long", bursts=base.scaled(length=0.5)),
        KernelScenario("executions twice as long", bursts=base.scaled(length=2)),
        KernelScenario("gaps half as long", bursts=base.scaled(gap=0.5)),
        KernelScenario("gaps twice as long", bursts=base.scaled(gap=2)),
        KernelScenario("GPU % in an execution x3", bursts=base.scaled(gpu=3)),
        KernelScenario("every execution uses the GPU", bursts=dataclasses.replace(
            base, no_gpu_probability=0.0)),
        KernelScenario("executions without a GPU run in a CPU kernel",
                       gpu_executions_only=True),
    ]


def _gpu_cost(platform: Platform, f: Figures, until) -> float:
    total = 0.0
    for n in f.nodes:
        pool = platform.pool(n.pool)
        if pool.has_gpu:
            total += max(0.0, (min(n.end or until, until) - n.start).total_seconds()
                         ) / 3600 * pool.price_per_node_hour
    return total


def _cpu_idle(platform: Platform, minutes: int | None) -> Platform:
    if minutes is None:
        return platform
    return dataclasses.replace(platform, profiles=tuple(
        p if platform.uses_gpu(p) else dataclasses.replace(p, idle_timeout_seconds=minutes * 60)
        for p in platform.profiles))


def _factors(kernels) -> tuple[float, float, float]:
    """:class:`KernelWeek`'s three factors of the kernels' utilization (of a week
    without jobs)."""
    f = kernels.model.figures
    executing, held = kernels.executing_gpu_hours, kernels.model.held_gpu_hours
    return (f.used_gpu_hours / executing if executing else 0.0,
            executing / held if held else 0.0,
            held / f.gpu_node_hours if f.gpu_node_hours else 0.0)


def week(platform: Platform, bundle: Bundle, scenario: KernelScenario, seed: int,
         factors: bool = True) -> KernelWeek:
    """One seed's week in the three worlds (``factors``: also the kernels' factored
    utilization, one more run of the kernels without the jobs)."""
    minutes = scenario.idle_minutes or kernel_idle_minutes(platform)
    timeout = round(minutes * 60)
    spec = spec_for(_cpu_idle(platform, scenario.cpu_idle_minutes),
                    Scenario("", gpu_idle_timeout_seconds=timeout))
    trace = generate(spec, GeneratorConfig(seed=seed, bursts=scenario.bursts))
    if not scenario.jobs:
        trace = dataclasses.replace(trace, jobs=())
    hours = (trace.header.end - trace.header.start).total_seconds() / 3600
    people, end = len(trace.people), trace.header.end
    cfg = ModelConfig(spot_evictions_per_hour=BASE_EVICTIONS, seed=seed)
    vm_minutes = max(minutes, IDLE_SHUTDOWN_MINUTES[0])
    vms = baseline(spec, trace, BaselineConfig(vm_minutes))
    servers = model(spec, trace, cfg).figures
    kcfg = KernelConfig(idle_timeout_seconds=timeout,
                        gpu_executions_only=scenario.gpu_executions_only)
    kernels = model_kernels(spec, trace, cfg, kcfg)
    notebooks = (model_kernels(spec, dataclasses.replace(trace, jobs=()), cfg, kcfg)
                 if factors else None)
    fixed_platform = sum(c.amount for c in platform_fixed(bundle, people, hours))
    fixed_vms = sum(c.amount for c in vm_fixed(people, hours))

    def world(f: Figures, fixed: float) -> World:
        return World(f.gpu_node_hours, _gpu_cost(spec, f, end), f.cost + fixed,
                     f.utilization or 0.0)

    return KernelWeek({"VMs": world(vms, fixed_vms),
                       "GPU servers": world(servers, fixed_platform),
                       "GPU kernels": world(kernels.model.figures, fixed_platform)},
                      kernels.kernels_started, kernels.start_waits,
                      *(_factors(notebooks) if notebooks else ()))


def _spread(values: Sequence[float], percent: bool = False, digits: int = 0) -> str:
    scale = 100 if percent else 1
    mid, low, high = (quantile(values, q) * scale for q in (0.5, 0.05, 0.95))
    unit = "%" if percent else ""
    return f"{mid:,.{digits}f}{unit} [{low:,.{digits}f}, {high:,.{digits}f}]"


def world_table(weeks: Sequence[KernelWeek]) -> str:
    """The base scenario: each world's figures, median [5th, 95th percentile]."""
    columns = ("world", "GPU node-hours", "GPU cost", "every cost", "GPU cost / VMs'",
               "utilization of billed GPU-hours")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for name in WORLDS:
        ws = [w.worlds[name] for w in weeks]
        share = [w.worlds[name].gpu_cost / w.worlds["VMs"].gpu_cost for w in weeks]
        lines.append("| " + " | ".join([
            name, _spread([x.gpu_node_hours for x in ws]), _spread([x.gpu_cost for x in ws]),
            _spread([x.every_cost for x in ws]), _spread(share, percent=True),
            _spread([x.utilization for x in ws], percent=True)]) + " |")
    return "\n".join(lines) + "\n"


SENSITIVITY = ("scenario", "kernels' GPU cost / VMs'", "kernels' GPU cost / servers'",
               "every cost: kernels / VMs", "every cost: kernels / servers",
               "utilization: kernels", "utilization: servers", "kernel starts",
               "kernel start wait p50 / p95")


def sensitivity_row(scenario: KernelScenario, weeks: Sequence[KernelWeek]) -> list[str]:
    def share(a: str, b: str, cost: str = "gpu_cost") -> list[float]:
        return [getattr(w.worlds[a], cost) / getattr(w.worlds[b], cost) for w in weeks]

    def wait(p: int) -> float:
        return quantile([(percentile(w.start_waits, p) or 0.0) / 60 for w in weeks], 0.5)

    return [scenario.label, _spread(share("GPU kernels", "VMs"), percent=True),
            _spread(share("GPU kernels", "GPU servers"), percent=True),
            _spread(share("GPU kernels", "VMs", "every_cost"), percent=True),
            _spread(share("GPU kernels", "GPU servers", "every_cost"), percent=True),
            _spread([w.worlds["GPU kernels"].utilization for w in weeks], percent=True),
            _spread([w.worlds["GPU servers"].utilization for w in weeks], percent=True),
            _spread([float(w.kernel_starts) for w in weeks]),
            f"{wait(50):.1f} / {wait(95):.1f} min"]


def sensitivity_table(rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(SENSITIVITY) + " |", "|" + "---|" * len(SENSITIVITY)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def factor_lines(weeks: Sequence[KernelWeek]) -> list[str]:
    """The kernels' utilization (notebooks only), factored: what stands in its way."""
    use = [w.use_while_executing for w in weeks]
    executing = [w.executing_share for w in weeks]
    held = [w.held_share for w in weeks]
    product = [a * b * c for a, b, c in zip(use, executing, held)]
    return ["the kernels' utilization of billed GPU-hours, notebooks only, as a product:",
            f"  GPU use while a cell runs (work / GPU held while executing): "
            f"{_spread(use, percent=True)}",
            f"  x share of a kernel's GPU time with a cell running: "
            f"{_spread(executing, percent=True)}",
            f"  x share of billed GPU-hours held by a kernel (packing, boots, empty "
            f"nodes): {_spread(held, percent=True)}",
            f"  = {_spread(product, percent=True)}"]


def verdict(weeks: Sequence[KernelWeek]) -> list[str]:
    """Whether the median week meets the issue's two targets."""
    kernels = [w.worlds["GPU kernels"] for w in weeks]
    utilization = quantile([k.utilization for k in kernels], 0.5)
    share = quantile([w.worlds["GPU kernels"].gpu_cost / w.worlds["VMs"].gpu_cost
                      for w in weeks], 0.5)
    return [f"utilization of billed GPU-hours >= {TARGET_UTILIZATION:.0%}: "
            f"{'met' if utilization >= TARGET_UTILIZATION else 'missed'} "
            f"(median week {utilization:.0%})",
            f"GPU cost <= {TARGET_COST_SHARE:.0%} of VMs with the same idle rule: "
            f"{'met' if share <= TARGET_COST_SHARE else 'missed'} (median week {share:.0%})"]
