"""What the benchmark hub's heap holds, counted inside it when asked (a diagnostic of
the soak, :mod:`benchmarks.soak` ``--census``): with ``BENCH_CENSUS`` set to a number
of seconds in the hub's environment, its config's :func:`install` counts that often
every object the garbage collector tracks, by type, the spawners, and what the
shared watches hold (the objects of their ``resources`` and of their graveyards), and
appends it as a JSON line to ``census.jsonl`` in the hub's working directory;
:func:`lines` says them back, one line each. Each count walks the whole heap in the event loop (about a second for a few
hundred MiB), so a run with a census is not one to time."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

ENV = "BENCH_CENSUS"
FILE = "census.jsonl"
TOP = 60  # types written, the most numerous first


def count(objects: list) -> dict:
    """The census of ``objects``: the most numerous types, and what the watches hold."""
    types: Counter = Counter()
    watched = graves = reflectors = spawners = 0
    for obj in objects:
        kind = type(obj)
        types[f"{kind.__module__}.{kind.__qualname__}"] += 1
        if kind.__name__.endswith("Spawner"):
            spawners += 1
        elif kind.__name__ == "Graveyard":
            graves += len(obj)
        elif kind.__name__.endswith("Reflector") and isinstance(
                getattr(obj, "resources", None), dict):
            reflectors += 1
            watched += len(obj.resources)
    return {"types": dict(types.most_common(TOP)), "objects": len(objects),
            "reflectors": reflectors, "watched": watched, "graves": graves,
            "spawners": spawners}


def install(directory: Path = Path(".")) -> None:
    """Take a census every ``$BENCH_CENSUS`` seconds (nothing if unset)."""
    every = float(os.environ.get(ENV) or 0)
    if every <= 0:
        return
    loop = asyncio.get_event_loop()
    path = directory / FILE

    def take():
        started = time.perf_counter()
        found = count(gc.get_objects())
        found.update(at=time.time(), blocks=sys.getallocatedblocks(),
                     seconds=round(time.perf_counter() - started, 3))
        with path.open("a") as out:
            out.write(json.dumps(found) + "\n")
        loop.call_later(every, take)

    loop.call_later(every, take)


def lines(directory: Path, began: float) -> list[str]:
    """The censuses taken in ``directory``, a line each, oldest first, at seconds since
    wall time ``began``."""
    path = directory / FILE
    found = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [f"census at {c['at'] - began:5.0f}s: {c['objects']:,} objects, "
            f"{c['blocks']:,} blocks, {c['spawners']} spawners, {c['reflectors']} watches "
            f"holding {c['watched']:,} objects and {c['graves']:,} graves "
            f"(counted in {c['seconds']:.2f} s)" for c in found]
