"""The spawn benchmarks as interleaved rounds: in each round the baseline hub (plain
KubeSpawner) and then ours (GPUSpawner), ABAB…, each hub a fresh process started on a
clean slate (:mod:`benchmarks.slate`: no pod, Workload, event or node the previous hub
left), with the same sizes, timeouts and poll interval (:mod:`benchmarks.hub_config`).
At least ``min_rounds``; more while the widest spread of the goal figures' ratios is
wider than the goals' margin and another round fits in the time left.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import scenarios, slate
from .hubs import Ports, running_hub
from .spawns import HubFigures, burst, sequential, steady_rss

MODES = ("kube", "gpu")  # A then B in every round
MARGIN = 0.05  # the goals' margin: ratios within 1.05


@dataclass(frozen=True)
class Sizes:
    """What one hub does in a round (``python -m benchmarks --help``)."""

    spawns: int
    burst: int
    idle: float
    settle: float
    queue: int
    fallback: int
    window: float  # seconds the queued scenario is measured over
    timeout: float  # a burst or fallback spawn's limit, censored at it


@dataclass(frozen=True)
class Cluster:
    """The dev cluster the rounds run on."""

    spec: Path
    state_dir: Path
    hub_kubeconfig: Path
    admin_kubeconfig: Path
    namespaces: tuple[str, ...]  # the team namespaces, cleaned before each hub
    ports: Ports


async def measure_hub(mode: str, cluster: Cluster, sizes: Sizes, hubdir: Path) -> HubFigures:
    figures = HubFigures()
    async with running_hub(mode, cluster.spec, hubdir, cluster.ports,
                           cluster.hub_kubeconfig) as (hub, startup):
        figures.startup = startup
        await sequential(hub, mode, sizes.spawns, cluster.state_dir, hubdir, sizes.idle,
                         figures)
        figures.rss_mib = await steady_rss(hub, sizes.settle)
        if sizes.burst:
            await burst(hub, mode, sizes.burst, hubdir, figures, sizes.timeout)
        if sizes.queue:
            figures.queued = await scenarios.queued(hub, mode, sizes.queue, sizes.window,
                                                    figures.idle_cpu_rate, hubdir)
        if sizes.fallback:
            figures.fallback = await scenarios.fallback(
                hub, mode, sizes.fallback, sizes.timeout, figures.idle_cpu_rate,
                cluster.admin_kubeconfig)
    return figures


async def interleaved(cluster: Cluster, sizes: Sizes, workdir: Path, min_rounds: int,
                      max_rounds: int, deadline: float, widest: Callable[[list], float],
                      failed: Callable[[str], None]) -> list[dict[str, HubFigures]]:
    """The complete rounds (``{mode: figures}``). ``deadline``: ``time.monotonic()``
    after which no round starts unless fewer than ``min_rounds`` are done;
    ``widest(rounds)``: the widest relative spread of the goal figures' ratios;
    ``failed(name)``: a round that crashed (its traceback printed; the next runs)."""
    rounds: list[dict[str, HubFigures]] = []
    attempts = 0
    while attempts < max_rounds:
        attempts += 1
        started, figures = time.monotonic(), {}
        for mode in MODES:
            name = f"round {attempts} ({mode})"
            print(f"   {name}", flush=True)
            try:
                cleaned = await slate.clean(cluster.admin_kubeconfig, cluster.namespaces)
                print(f"   clean slate in {cleaned:.0f}s", flush=True)
                figures[mode] = await measure_hub(mode, cluster, sizes,
                                                  workdir / f"round{attempts}-{mode}")
            except Exception:  # reported; the round does not count
                traceback.print_exc()
                failed(name)
                break
        if len(figures) == len(MODES):
            rounds.append(figures)
        took = time.monotonic() - started
        if len(rounds) < min_rounds:
            continue
        spread = widest(rounds)
        print(f"   {len(rounds)} rounds; widest spread of a goal ratio {spread:.0%}", flush=True)
        if (not math.isnan(spread) and spread <= MARGIN) or time.monotonic() + took > deadline:
            break
    try:  # for the watch memory after the rounds
        await slate.clean(cluster.admin_kubeconfig, cluster.namespaces)
    except Exception:
        traceback.print_exc()
        failed("clean slate after the rounds")
    return rounds
