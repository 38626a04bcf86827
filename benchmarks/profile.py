"""``python -m benchmarks.profile [gpu|kube] [N]``: where a hub's CPU goes over N
sequential spawns and stops (30), the evidence behind the spawn findings of
docs/benchmarks.md.

It brings up the benchmarks' dev cluster, starts one hub as :mod:`benchmarks.spawns`
does, makes the warm-up spawn, then records the hub process with ``py-spy record``
(raw stacks, 100 Hz) over the N spawns and stops, and prints the number of busy
samples (threads waiting left out) and the share of them whose stack passes through
each of :data:`PARTS` (a sample may count in several).
The raw stacks stay in the working directory for a closer look.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
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
    "usage ledger writes (Ledger.record_sync)": "record_sync",
    "queue-wait row (queuewaits.record)": "queuewaits.py",
    "our shared watches (resumingwatch)": "resumingwatch.py",
    "KubeSpawner's reflectors": "kubespawner/reflector.py",
    "GPUSpawner.poll": "poll (jupyterhub_gpu/",
    "apply_profile": "apply_profile",
    "SQLAlchemy commits": "commit (sqlalchemy/",
    "json": "json/",
}


#: a sample whose innermost frame is one of these is a thread waiting, not working
IDLE = ("_worker (concurrent/futures/thread.py", "_run_safe_shutdown_loop (pycares/",
        "Selector.select (selectors.py")


def shares(raw: str) -> dict[str, float]:
    """Per part, the share of the busy samples (py-spy's raw format: ``stack count``
    lines; those of a waiting thread, :data:`IDLE`, left out)."""
    counts, total = Counter(), 0
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit() or any(w in stack.rsplit(";", 1)[-1] for w in IDLE):
            continue
        total += int(n)
        for name, needle in PARTS.items():
            if needle in stack:
                counts[name] += int(n)
    return {name: counts[name] / total if total else 0.0 for name in PARTS} | {
        "samples": total}


async def profile(mode: str, n: int, work: Path) -> dict[str, float]:
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
                                    "--output", str(out)], stdout=subprocess.DEVNULL)
            for _ in range(n):
                await spawn_until_ready(hub, user, options)
                await stop_until_gone(hub, user)
            spy.send_signal(signal.SIGINT)
            await asyncio.to_thread(spy.wait, 60)
    return shares(out.read_text())


def main() -> None:
    mode, n = (sys.argv[1:2] or ["gpu"])[0], int((sys.argv[2:3] or [30])[0])
    work = Path(tempfile.mkdtemp(prefix="jupyterhub-gpu-profile-"))
    result = asyncio.run(profile(mode, n, work))
    print(f"{mode} hub, {n} spawns and stops, {result.pop('samples')} busy samples; raw stacks "
          f"in {work}")
    for name, share in result.items():
        print(f"  {share:6.1%}  {name}")


if __name__ == "__main__":
    main()
