"""The results table of ``docs/benchmarks.md``: rows, their rendering, the machine."""

from __future__ import annotations

import math
import os
import platform
import subprocess
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Iterable

from .stats import Spread, ratio

#: the packages whose versions the report names
PACKAGES = ("jupyterhub-gpu", "jupyterhub", "jupyterhub-kubespawner", "jupyterhub-idle-culler",
            "kubernetes-asyncio")


@dataclass(frozen=True)
class Row:
    """One figure: ours against its baseline, measured in the same run."""

    section: str
    figure: str
    unit: str
    ours: float
    baseline: float = math.nan  # nan: no baseline (e.g. a figure of ours alone)
    goal: str = ""  # e.g. "ratio <= 1.05"
    note: str = ""
    spread: Spread | None = None  # a figure of interleaved rounds: its ratios' spread

    @classmethod
    def rounds(cls, section: str, figure: str, unit: str, spread: Spread, goal: str = "",
               note: str = "") -> "Row":
        """A figure over interleaved rounds: each side's median, the median ratio."""
        return cls(section, figure, unit, spread.ours, spread.baseline, goal, note, spread)

    @property
    def ratio(self) -> float:
        if self.spread is not None:
            return self.spread.ratio
        return ratio(self.ours, self.baseline)

    def ratio_text(self) -> str:
        """``1.02``, or over rounds ``1.02 (0.97–1.08, 5 rounds)``; ``-`` unknown."""
        if math.isnan(self.ratio):
            return "-"
        if self.spread is None:
            return f"{self.ratio:.2f}"
        rounds = self.spread.rounds
        return (f"{self.ratio:.2f} ({self.spread.low:.2f}–{self.spread.high:.2f}, "
                f"{rounds} round{'' if rounds == 1 else 's'})")


def number(value: float, unit: str = "") -> str:
    """A figure as the table shows it: 3 significant digits, ``-`` for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value == int(value) and abs(value) >= 1:
        text = f"{int(value):,}"
    elif abs(value) >= 100:
        text = f"{value:,.0f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".rstrip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(rows: Iterable[Row]) -> str:
    """A Markdown table: section, figure, ours, baseline, ratio (over rounds: the median
    ratio and the lowest and highest), goal, note."""
    lines = ["| | figure | ours | baseline | ratio | goal | note |",
             "|---|---|---:|---:|---:|---|---|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(c) for c in (
            row.section, row.figure, number(row.ours, row.unit),
            number(row.baseline, row.unit), row.ratio_text(), row.goal, row.note)) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Machine:
    cpus: int
    cpu_model: str
    memory_gib: float
    kernel: str
    python: str
    packages: dict[str, str] = field(default_factory=dict)
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def render(self) -> str:
        pkgs = ", ".join(f"{name} {v}" for name, v in self.packages.items())
        load = ", ".join(f"{x:.2f}" for x in self.load_average)
        return (f"- machine: {self.cpus} CPUs ({self.cpu_model}), {self.memory_gib:.1f} GiB, "
                f"Linux {self.kernel}, load average at the end {load}\n"
                f"- Python {self.python}; {pkgs}")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _package(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def this_machine(extra: dict[str, str] | None = None) -> Machine:
    """The machine and versions the run measured on; ``extra``: e.g. Kueue's."""
    import psutil

    return Machine(cpus=os.cpu_count() or 0, cpu_model=_cpu_model(),
                   memory_gib=psutil.virtual_memory().total / 2**30,
                   kernel=platform.release(), python=platform.python_version(),
                   packages={**{p: _package(p) for p in PACKAGES}, **(extra or {})},
                   load_average=os.getloadavg())


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
