"""``python -m benchmarks.profile [gpu|kube] [N] [--gil]``: where a hub's CPU goes over N
sequential spawns and stops (30), the evidence behind the spawn findings of
docs/benchmarks.md.

It brings up the benchmarks' dev cluster, starts one hub as :mod:`benchmarks.spawns`
does, makes the warm-up spawn, then records the hub process with ``py-spy record``
(raw stacks, 100 Hz; with ``--gil`` only samples of the thread holding the GIL, so
that a thread waiting in C for the disk, e.g. a SQLite commit, is not counted) over
the N spawns and stops, and prints the hub process's CPU-seconds per spawn and stop
(user + system, the same figure as :func:`benchmarks.spawns.sequential`'s gross one,
py-spy's pauses of the process included), the number of busy samples (threads
waiting left out) and the share of them whose stack passes through each of
:data:`PARTS` (a sample may count in several), then the functions of
``jupyterhub_gpu`` innermost in the busy samples, by their share.
The raw stacks stay in the working directory for a closer look.
py-spy is not a dependency of the package: ``pip install py-spy`` (or put it on PATH).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from .devcluster import dev_cluster, write_bench_spec
from .hubs import Ports, ok_server, running_hub
from .spawns import _make_users, _options, spawn_until_ready, stop_until_gone
from tests.integration.ports import ENV_OFFSET

#: what to look for in a stack, by a name for the report
PARTS = {
    "jupyterhub_gpu (any)": "jupyterhub_gpu/",
    "usage ledger writes (its thread's batches)": "_write_batch (jupyterhub_gpu/ledger/",
    "usage ledger rollup (per day, per month)": "jupyterhub_gpu/ledger/rollup.py",
    "our shared watches (watches/resuming.py)": "jupyterhub_gpu/watches/resuming.py",
    "KubeSpawner's reflectors": "kubespawner/reflector.py",
    "GPUSpawner.poll": "poll (jupyterhub_gpu/",
    "apply_profile": "apply_profile",
    "the queue's start (kueue/start.py)": "jupyterhub_gpu/kueue/start.py",
    "SQLAlchemy commits": "commit (sqlalchemy/",
    "json": "json/",
}


#: a sample whose innermost frame is one of these is a thread waiting, not working
IDLE = ("_worker (concurrent/futures/thread.py", "_run_safe_shutdown_loop (pycares/",
        "Selector.select (selectors.py")

#: how many of the innermost ``jupyterhub_gpu`` functions the report lists
TOP = 12

_LINE = re.compile(r":\d+\)$")


def busy_stacks(raw: str) -> list[tuple[list[str], int]]:
    """(frames outermost first, count) of each busy stack of py-spy's raw format
    (``frame;frame... count`` lines); those of a waiting thread (:data:`IDLE`) left out."""
    out = []
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit() or any(w in stack.rsplit(";", 1)[-1] for w in IDLE):
            continue
        out.append((stack.split(";"), int(n)))
    return out


def shares(raw: str) -> dict[str, float]:
    """Per part, the share of the busy samples."""
    counts, total = Counter(), 0
    for frames, n in busy_stacks(raw):
        total += n
        stack = ";".join(frames)
        for name, needle in PARTS.items():
            if needle in stack:
                counts[name] += n
    return {name: counts[name] / total if total else 0.0 for name in PARTS} | {
        "samples": total}


def ours_innermost(raw: str, package: str = "jupyterhub_gpu/") -> Counter:
    """Busy samples by the innermost frame of ``package`` in them (``function (file)``,
    without its line)."""
    counts: Counter = Counter()
    for frames, n in busy_stacks(raw):
        ours = [f for f in frames if package in f]
        if ours:
            counts[_LINE.sub(")", ours[-1])] += n
    return counts


async def profile(mode: str, n: int, work: Path, gil: bool) -> tuple[str, float]:
    """The raw stacks of the N spawns and stops, and the hub's CPU-seconds over them."""
    offset = int(os.environ.get(ENV_OFFSET, "0"))
    ports, spec = Ports.shifted(offset), write_bench_spec(work, room=10)
    state = work / "cluster"
    with dev_cluster(spec, state, offset) as (_, kubeconfig), ok_server(ports.ok):
        async with running_hub(mode, spec, work / f"hub-{mode}", ports, kubeconfig) as (hub, _):
            user, options = f"prof-{mode}", _options(mode, "data-science")
            await _make_users(hub, {user: "data-science"})
            await spawn_until_ready(hub, user, options)
            await stop_until_gone(hub, user)
            out = work / f"profile-{mode}.txt"
            spy = subprocess.Popen([shutil.which("py-spy") or "py-spy", "record", "--pid",
                                    str(hub.proc.pid), "--rate", "100", "--format", "raw",
                                    *(["--gil"] if gil else []),
                                    "--output", str(out)], stdout=subprocess.DEVNULL)
            await asyncio.sleep(1)  # py-spy attaches
            cpu = hub.cpu_seconds()
            for _ in range(n):
                await spawn_until_ready(hub, user, options)
                await stop_until_gone(hub, user)
            cpu = hub.cpu_seconds() - cpu
            spy.send_signal(signal.SIGINT)
            await asyncio.to_thread(spy.wait, 60)
    return out.read_text(), cpu


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", default="gpu", choices=("gpu", "kube"),
                        help="gpu: GPUSpawner; kube: the baseline, plain KubeSpawner")
    parser.add_argument("n", nargs="?", type=int, default=30, help="spawns and stops (30)")
    parser.add_argument("--gil", action="store_true",
                        help="only samples of the thread holding the GIL (py-spy --gil)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jupyterhub-gpu-profile-"))
    raw, cpu = asyncio.run(profile(args.mode, args.n, work, args.gil))
    result = shares(raw)
    print(f"{args.mode} hub, {args.n} spawns and stops: {cpu / args.n:.4f} CPU-seconds each "
          f"(py-spy attached); {result.pop('samples')} busy samples"
          f"{' holding the GIL' if args.gil else ''}; raw stacks in {work}")
    for name, share in result.items():
        print(f"  {share:6.1%}  {name}")
    total = sum(n for _, n in busy_stacks(raw)) or 1
    print("innermost jupyterhub_gpu functions:")
    for name, count in ours_innermost(raw).most_common(TOP):
        print(f"  {count / total:6.1%}  {count:5d}  {name}")


if __name__ == "__main__":
    main()
