"""Item 6: a big spec (100 pools, 200 teams, 1,000 profiles): ``validate``, hub start-up
and the spawn form of a user allowed 50 profiles.

The spec is generated (:func:`big_spec`, pure); a user in group ``fifty`` belongs to
team ``t000`` and may start exactly 50 profiles.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from jupyterhub_gpu.spec.images import NOTEBOOK_IMAGE, image_name, package_version

from .report import Row
from .stats import percentile

#: the example's pool shapes, cycled: (vmSize, gpu, sharing, profile gpus, cpu, memory)
SHAPES = (
    ("Standard_NC8as_T4_v3", "T4", {"mode": "timeslicing", "replicas": 4}, 1, 1.5, "12Gi"),
    ("Standard_NC24ads_A100_v4", "A100-80GB", {"mode": "mig", "migProfile": "3g.40gb"}, 1, 8,
     "96Gi"),
    ("Standard_NC24ads_A100_v4", "A100-80GB", {"mode": "exclusive"}, 1, 20, "200Gi"),
    ("Standard_D8s_v5", "none", None, 0, 2, "8Gi"),
)
FIFTY_GROUP = "fifty"  # the group of the user allowed 50 profiles
IMAGE = f"{image_name('jupyterhubgpu', NOTEBOOK_IMAGE)}:{package_version()}"


def _pool(i: int) -> dict[str, Any]:
    vm, gpu, sharing, *_ = SHAPES[i % len(SHAPES)]
    pool = {"name": f"p{i:03d}", "vmSize": vm, "gpu": gpu, "minNodes": 0, "maxNodes": 5,
            "pricePerNodeHour": 1.0}
    if sharing:
        pool["sharing"] = sharing
    return pool


def _profile(i: int, pools: int, teams: int, fifty: int) -> dict[str, Any]:
    pool = i % pools
    *_, gpus, cpu, memory = SHAPES[pool % len(SHAPES)]
    groups = [f"g{i % teams:03d}"] + ([FIFTY_GROUP] if i < fifty else [])
    profile = {"slug": f"prof-{i:04d}", "displayName": f"Profile {i}",
               "description": f"Generated profile {i} on pool p{pool:03d}.",
               "pool": f"p{pool:03d}", "cpu": cpu, "memory": memory,
               "image": IMAGE, "priority": "interactive", "idleTimeout": "30m",
               "allowedGroups": groups}
    if gpus:  # a CPU pool's profile names no gpus
        profile["gpus"] = gpus
    if i == 0:
        profile["default"] = True
    return profile


def big_spec(pools: int = 100, teams: int = 200, profiles: int = 1000,
             fifty: int = 50) -> dict[str, Any]:
    """A valid spec: profile ``i`` runs on pool ``i % pools`` and is allowed to group
    ``g<i % teams>`` (and to ``fifty`` if ``i < fifty``); each team has a quota on
    the pools of its profiles; team ``t000`` also has group ``fifty`` and a quota on
    the pools of the first ``fifty`` profiles."""
    quota: dict[int, set[int]] = {t: set() for t in range(teams)}
    for i in range(profiles):
        quota[i % teams].add(i % pools)
    quota[0] |= {i % pools for i in range(fifty)}
    return {
        "pools": [_pool(i) for i in range(pools)],
        "teams": [{"name": f"t{t:03d}", "namespace": f"jhub-t{t:03d}",
                   "groups": [f"g{t:03d}"] + ([FIFTY_GROUP] if t == 0 else []),
                   "quota": {f"p{p:03d}": 2 for p in sorted(quota[t])}}
                  for t in range(teams)],
        "priorities": [{"name": "interactive", "value": 1000}],
        "profiles": [_profile(i, pools, teams, fifty) for i in range(profiles)],
    }


def write_big_spec(directory: Path, **sizes: int) -> Path:
    path = directory / "big-platform.yaml"
    path.write_text(yaml.safe_dump(big_spec(**sizes), sort_keys=False))
    return path


def _validate_seconds(spec: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "jupyterhub_gpu.cli", "validate", str(spec)],
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"validate failed on the big spec: {done.stdout}{done.stderr}")
    return elapsed


def _form_seconds(spec: Path, repeat: int) -> tuple[float, int]:
    """Median seconds to render the form of a user in group ``fifty``; the number
    of profiles it lists."""
    from jupyterhub_gpu.hub.form import render_form
    from jupyterhub_gpu.spec.parse import load_platform

    platform = load_platform(spec)
    groups = frozenset({FIFTY_GROUP})
    listed = len(platform.profiles_for(groups))
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        render_form(platform, groups, None, availability_url="/hub/api/x")
        times.append(time.perf_counter() - started)
    return percentile(times, 50), listed


def run(workdir: Path, short: bool, hub_startup) -> list[Row]:
    """``hub_startup(spec_path) -> (ours_s, kubespawner_s)``: the hub start-up of
    :mod:`benchmarks.hubs` for this spec (``None`` to leave it out)."""
    sizes = dict(pools=10, teams=20, profiles=100, fifty=50) if short else {}
    spec = write_big_spec(workdir, **sizes)
    n = sizes or dict(pools=100, teams=200, profiles=1000, fifty=50)
    label = f"{n['pools']} pools, {n['teams']} teams, {n['profiles']} profiles"
    rows = [Row("big spec", f"`jupyterhub-gpu validate` ({label}), whole command", "s",
                _validate_seconds(spec))]
    form, listed = _form_seconds(spec, 3 if short else 20)
    rows.append(Row("big spec", f"spawn form render, user allowed {listed} profiles (median)",
                    "ms", form * 1000))
    if hub_startup is not None:
        ours, baseline = hub_startup(spec)
        rows.append(Row("big spec", f"hub start-up to /hub/health ({label})", "s", ours,
                        baseline, note="baseline: KubeSpawner, the same profiles as "
                        "profile_list (one entry per profile and team that may start it)"))
    return rows
