"""Cell executions inside a working period: the bursts of GPU use the generator puts
in each of a person's working periods, separated by editing and reading
(docs/replay.md, "Cell executions").

Where the figures come from. NotebookOS (Carver, Zhang, Wang, Mahadik, Cheng, "NotebookOS:
A Replicated Notebook Platform for Interactive Training with On-Demand GPUs", ASPLOS 2026,
arXiv:2503.20591) characterises production notebook traces of Adobe's notebook platform
("AdobeTrace"): long-running sessions whose GPU use is intermittent and sporadic (its
abstract). We could not read the paper's body (its figures) with the tools we have, so
the numbers below are **counted by us** from the workload its authors published from the
same production trace: ``driver-backend/configs/workload_templates/adobe sensei june 1-2
2021 (Tv2).json`` in github.com/ds2-lab/NotebookOS-Dashboard (commit e16452c, removed from
the repository's tree since): 59 sessions of June 1-2 2021, 790 training (cell) events in
whole minutes (the workload's 60-second ticks). They are figures of that file, not
figures printed in the paper. Each distribution is a log-normal matched to the file's
median and 90th percentile (nearest rank), so both quantiles are cited and the sigma is
``ln(p90 / median) / 1.2816``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .trace import Burst

#: the standard normal's 90th percentile: a log-normal's p90 is median * exp(Z90 * sigma)
Z90 = 1.2815515655446004
#: the NotebookOS authors' workload file the figures below are counted from
SOURCE = ("NotebookOS (ASPLOS 2026) authors' workload from Adobe's production notebook "
          "trace: 'adobe sensei june 1-2 2021 (Tv2).json', github.com/ds2-lab/"
          "NotebookOS-Dashboard at e16452c (59 sessions, 790 cell executions; counted by us)")


@dataclass(frozen=True)
class LogNormal:
    """A log-normal given by its median and 90th percentile."""

    median: float
    p90: float

    def __post_init__(self):
        if not 0 < self.median < self.p90:
            raise ValueError(f"a log-normal needs 0 < median < p90, got median "
                             f"{self.median:g}, p90 {self.p90:g}")

    @property
    def sigma(self) -> float:
        return math.log(self.p90 / self.median) / Z90

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma ** 2 / 2)

    def draw(self, rng: random.Random) -> float:
        return rng.lognormvariate(math.log(self.median), self.sigma)

    def scaled(self, factor: float) -> LogNormal:
        """The same shape, every value times ``factor``."""
        return LogNormal(self.median * factor, self.p90 * factor)


@dataclass(frozen=True)
class BurstModel:
    # a cell execution's length, minutes: the file's 790 events have median 6 and
    # p90 32 (mean 26.7, p99 531: a few run for hours; the file's shortest is 3 minutes,
    # and 265 are exactly 3, so shorter cells are not resolved in it). Cross-check: the
    # same repository's driver-backend/scripts/tiresias_generator/sensei_june_60sec.csv
    # (commit 789b8b1), 30,909 events of June 2021, has median 5 and p90 32 (counted)
    length_minutes: LogNormal = field(default_factory=lambda: LogNormal(6, 32))
    # the gap from one execution's end to the next one's start in the same session,
    # minutes: the file's 731 gaps have median 3 and p90 38 (mean 28.9). The file's gaps
    # include lunches and nights; here a gap that runs past the working period's end
    # ends the period instead (the generator's pauses, lunch and meetings, assumptions,
    # make the long breaks)
    gap_minutes: LogNormal = field(default_factory=lambda: LogNormal(3, 38))
    # a GPU execution's GPU utilization, % of one GPU: the 518 executions of the file
    # that hold a GPU have median 8.5 and p90 36.1 (mean 14.4), averaged over their GPUs;
    # capped at 100 and at what the profile's share of a GPU can do
    gpu_percent: LogNormal = field(default_factory=lambda: LogNormal(8.5, 36.1))
    # executions that hold no GPU: 272 of the file's 790 (34.4%)
    no_gpu_probability: float = 272 / 790

    def __post_init__(self):
        if not 0 <= self.no_gpu_probability <= 1:
            raise ValueError(f"no_gpu_probability {self.no_gpu_probability} is not from 0 to 1")

    def scaled(self, length: float = 1.0, gap: float = 1.0, gpu: float = 1.0) -> BurstModel:
        """The model with each distribution scaled (a sensitivity row)."""
        return BurstModel(self.length_minutes.scaled(length), self.gap_minutes.scaled(gap),
                          self.gpu_percent.scaled(gpu), self.no_gpu_probability)


def _seconds(minutes: float) -> timedelta:
    return timedelta(seconds=round(minutes * 60))


def bursts(rng: random.Random, model: BurstModel, start: datetime, planned_end: datetime,
           limit: datetime, cap: float) -> tuple[Burst, ...]:
    """The cell executions of a working period from ``start`` that its person means to
    end at ``planned_end``: a gap of editing, an execution, a gap, ... while the next
    execution starts before ``planned_end``. An execution runs its whole length (its
    person waits, or goes to their meeting while it runs) but stops at ``limit`` (they
    leave). ``cap``: the most of one GPU the profile can use (0: a CPU profile, whose
    executions use none)."""
    out: list[Burst] = []
    at = start + _seconds(model.gap_minutes.draw(rng))
    while at < planned_end:
        end = min(limit, at + _seconds(model.length_minutes.draw(rng)))
        no_gpu = rng.random() < model.no_gpu_probability
        gpu = model.gpu_percent.draw(rng)
        if end > at:
            out.append(Burst(at, end, 0.0 if no_gpu or not cap else
                             round(min(gpu, cap, 100.0), 1)))
        at = end + _seconds(model.gap_minutes.draw(rng))
    return tuple(out)
