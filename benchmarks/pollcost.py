"""What each ``poll()`` of the hub's spawners costs, measured inside the benchmark hub
(its config calls :func:`install` with the spawner class it runs): the wall time from
the call to its answer, written to ``poll-cost.tsv`` in the hub's working directory
(wall time, seconds), a line each; :func:`costs_between` reads them back. Wall time,
not CPU: while a poll waits on something, other work of the event loop counts in it,
so it is an upper bound of the poll's own cost."""

from __future__ import annotations

import functools
import time
from pathlib import Path

FILE = "poll-cost.tsv"


def install(spawner_class: type, directory: Path = Path(".")) -> None:
    out = open(directory / FILE, "a", buffering=1)  # line-buffered
    poll = spawner_class.poll

    @functools.wraps(poll)
    async def timed(self):
        started = time.perf_counter()
        try:
            return await poll(self)
        finally:
            out.write(f"{time.time():.3f}\t{time.perf_counter() - started:.6f}\n")

    spawner_class.poll = timed


def costs_between(directory: Path, start: float, end: float) -> list[float]:
    """The poll costs (seconds) recorded between wall times ``start`` and ``end``."""
    from .lag import samples_between

    return samples_between(directory / FILE, start, end)
