"""The hub's event-loop lag, sampled inside the benchmark hub (its config installs
:func:`install`): every ``INTERVAL`` a callback is due; how late it runs is the lag.
Samples go to ``loop-lag.tsv`` in the hub's working directory (wall time, lag
seconds), a line each, written at once (a short burst is read back right after it
ends); :func:`lags_between` reads them back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

INTERVAL = 0.05
FILE = "loop-lag.tsv"


def install(directory: Path = Path(".")) -> None:
    loop = asyncio.get_event_loop()
    out = open(directory / FILE, "a", buffering=1)  # line-buffered
    state = {"due": loop.time() + INTERVAL}

    def tick():
        now = loop.time()
        out.write(f"{time.time():.3f}\t{max(0.0, now - state['due']):.4f}\n")
        state["due"] = now + INTERVAL
        loop.call_at(state["due"], tick)

    loop.call_at(state["due"], tick)


def lags_between(directory: Path, start: float, end: float) -> list[float]:
    """The lag samples taken between wall times ``start`` and ``end``."""
    return samples_between(directory / FILE, start, end)


def samples_between(path: Path, start: float, end: float) -> list[float]:
    """The values of a ``wall time<TAB>value`` file whose time is in [start, end]."""
    values: list[float] = []
    if not path.exists():
        return values
    for line in path.read_text().splitlines():
        when, _, value = line.partition("\t")
        try:
            if start <= float(when) <= end:
                values.append(float(value))
        except ValueError:  # a line being written
            continue
    return values
