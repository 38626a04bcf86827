"""The 1x model over many generated weeks: the saving against VMs with the platform's
idle rule, every cost included, as a median and the range 90% of the weeks fall in,
for a base case and one changed knob at a time (docs/replay.md, "The 1x model")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from ..spec.model import Platform
from . import prices
from .baseline import BaselineConfig, baseline
from .bursts import BurstModel
from .costs import Bundle, platform_fixed, spot_at_on_demand, vm_fixed
from .generate import GeneratorConfig, generate
from .model import ModelConfig, model

#: an A100-heavier mix than the generator's default (t4-shared 5, a100-mig-3g 2, ...)
A100_HEAVY = MappingProxyType({"t4-shared": 2, "a100-mig-3g": 3, "a100-training": 2,
                               "a100-spot": 2, "cpu": 1})
#: the eviction rate of the base case: the middle of :data:`prices.SPOT_EVICTIONS_PER_HOUR`
BASE_EVICTIONS = prices.SPOT_EVICTIONS_PER_HOUR[1]


@dataclass(frozen=True)
class Scenario:
    label: str
    team_size: int = 20
    profile_weights: Mapping[str, float] | None = None  # None: the generator's
    gpu_scale: float | None = None  # the executions' GPU % times this (None: as cited)
    gpu_idle_timeout_seconds: int | None = None  # the GPU profiles' idleTimeout
    model: ModelConfig = field(default_factory=lambda: ModelConfig(
        spot_evictions_per_hour=BASE_EVICTIONS))


def scenarios() -> list[Scenario]:
    """The base case, then one knob changed in each."""
    low, _, high = prices.SPOT_EVICTIONS_PER_HOUR
    return [
        Scenario("base: 20 people"),
        Scenario("team of 10", team_size=10),
        Scenario("team of 50", team_size=50),
        Scenario("A100-heavier profile mix", profile_weights=A100_HEAVY),
        Scenario("idle timeout 15 min (both sides)", gpu_idle_timeout_seconds=15 * 60),
        Scenario("idle timeout 60 min (both sides)", gpu_idle_timeout_seconds=60 * 60),
        Scenario("GPU % in an execution x3", gpu_scale=3),
        Scenario(f"spot evictions {100 * low:g}%/h", model=ModelConfig(
            spot_evictions_per_hour=low)),
        Scenario(f"spot evictions {100 * high:g}%/h", model=ModelConfig(
            spot_evictions_per_hour=high)),
        Scenario("empty nodes live 2 h (as the 300x replay)", model=ModelConfig(
            spot_evictions_per_hour=BASE_EVICTIONS, empty_node_seconds=7200)),
    ]


@dataclass(frozen=True)
class Week:
    """One seed's week: both worlds' costs, every cost included."""

    vm_cost: float
    platform_cost: float
    vm_cost_spot_on_demand: float  # the compute clusters' spot nodes at on-demand price
    platform_cost_spot_on_demand: float
    vm_gpu_node_hours: float
    platform_gpu_node_hours: float
    utilization: float
    evictions: int

    @property
    def saving(self) -> float:
        return 1 - self.platform_cost / self.vm_cost

    @property
    def saving_spot_on_demand(self) -> float:
        return 1 - self.platform_cost_spot_on_demand / self.vm_cost_spot_on_demand

    @property
    def gpu_saving(self) -> float:
        return 1 - self.platform_gpu_node_hours / self.vm_gpu_node_hours


def spec_for(platform: Platform, scenario: Scenario) -> Platform:
    """``platform`` with the scenario's idle timeout on every GPU profile."""
    if scenario.gpu_idle_timeout_seconds is None:
        return platform
    return dataclasses.replace(platform, profiles=tuple(
        dataclasses.replace(p, idle_timeout_seconds=scenario.gpu_idle_timeout_seconds)
        if platform.uses_gpu(p) else p for p in platform.profiles))


def generator(scenario: Scenario, seed: int) -> GeneratorConfig:
    extra = {}
    if scenario.profile_weights is not None:
        extra["profile_weights"] = scenario.profile_weights
    if scenario.gpu_scale is not None:
        extra["bursts"] = BurstModel().scaled(gpu=scenario.gpu_scale)
    return GeneratorConfig(team_size=scenario.team_size, seed=seed, **extra)


def week(platform: Platform, bundle: Bundle, scenario: Scenario, seed: int) -> Week:
    spec = spec_for(platform, scenario)
    trace = generate(spec, generator(scenario, seed))
    hours = (trace.header.end - trace.header.start).total_seconds() / 3600
    people = len(trace.people)
    vms = baseline(spec, trace, BaselineConfig())
    result = model(spec, trace, dataclasses.replace(scenario.model, seed=seed))
    fixed = sum(c.amount for c in platform_fixed(bundle, people, hours))
    vm_fixed_cost = sum(c.amount for c in vm_fixed(people, hours))
    f = result.figures
    return Week(
        vm_cost=vms.cost + vm_fixed_cost, platform_cost=f.cost + fixed,
        vm_cost_spot_on_demand=spot_at_on_demand(spec, vms.nodes, trace.header.end)
        + vm_fixed_cost,
        platform_cost_spot_on_demand=spot_at_on_demand(spec, f.nodes, trace.header.end)
        + fixed,
        vm_gpu_node_hours=vms.gpu_node_hours, platform_gpu_node_hours=f.gpu_node_hours,
        utilization=f.utilization or 0.0, evictions=result.evictions)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear between order statistics)."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _spread(values: Sequence[float], percent: bool = True) -> str:
    scale, unit = (100, "%") if percent else (1, "")
    mid, low, high = (quantile(values, q) * scale for q in (0.5, 0.05, 0.95))
    return f"{mid:.0f}{unit} [{low:.0f}, {high:.0f}]"


COLUMNS = ("scenario", "VMs' cost", "platform's cost", "cost saving",
           "saving, spot at on-demand", "GPU node-hour saving", "utilization",
           "evictions")


def row(scenario: Scenario, weeks: Sequence[Week]) -> list[str]:
    return [scenario.label,
            f"{quantile([w.vm_cost for w in weeks], 0.5):,.0f}",
            f"{quantile([w.platform_cost for w in weeks], 0.5):,.0f}",
            _spread([w.saving for w in weeks]),
            _spread([w.saving_spot_on_demand for w in weeks]),
            _spread([w.gpu_saving for w in weeks]),
            _spread([w.utilization for w in weeks]),
            _spread([float(w.evictions) for w in weeks], percent=False)]


def markdown(rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"
