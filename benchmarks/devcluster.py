"""The benchmarks' own dev cluster: the example spec with room for a burst (every
team's quota and every pool's node limit raised, nodes that boot in 2 s), and the
hub's ServiceAccount bound by the RBAC we ship plus the chart's hub Role, as in the
cluster tests."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any, Iterator

import yaml

from jupyterhub_gpu.devcluster.layout import Ports as ClusterPorts

from .scenarios import (FALLBACK_FIRST, FALLBACK_POOLS, FALLBACK_TEAM, QUEUE_POOL,
                        QUEUE_QUOTA, QUEUE_TEAM)

EXAMPLE_SPEC = Path(__file__).resolve().parent.parent / "config" / "platform.yaml"


#: (team, pool) -> units: the quotas the queued and fallback scenarios fill
#: (:mod:`benchmarks.scenarios`); the team may borrow none of that pool
SMALL_QUOTAS = {(QUEUE_TEAM, QUEUE_POOL): QUEUE_QUOTA,
                (FALLBACK_TEAM, FALLBACK_POOLS[0]): FALLBACK_FIRST}


def bench_spec(example: dict[str, Any], room: int) -> dict[str, Any]:
    """``example`` with every quota and node limit big enough for ``room`` servers of
    any one profile, except :data:`SMALL_QUOTAS`; nodes booting in 2 s and kept 5 min
    once empty (so that a sequential run does not wait for a new node each time)."""
    spec = copy.deepcopy(example)
    for pool in spec["pools"]:
        pool.update(maxNodes=max(pool["maxNodes"], room), bootTime="2s",
                    consolidateAfter="5m")
    for team in spec["teams"]:
        team["quota"] = {pool: max(units, room) for pool, units in team["quota"].items()}
        team.pop("borrowingLimit", None)
        for (name, pool), units in SMALL_QUOTAS.items():
            if team["name"] == name:
                team["quota"][pool] = units
                team.setdefault("borrowingLimit", {})[pool] = 0
    return spec


def write_bench_spec(directory: Path, room: int) -> Path:
    path = directory / "bench-platform.yaml"
    example = yaml.safe_load(EXAMPLE_SPEC.read_text())
    path.write_text(yaml.safe_dump(bench_spec(example, room), sort_keys=False))
    return path


def cluster_ports(offset: int) -> ClusterPorts:
    return ClusterPorts.shifted(offset)


def prometheus_url(offset: int) -> str:
    """The dev cluster's Prometheus (the culler benchmark's GPU usage)."""
    from jupyterhub_gpu.devcluster import prometheus

    return prometheus.url(cluster_ports(offset))


@contextlib.contextmanager
def dev_cluster(spec: Path, state_dir: Path, offset: int) -> Iterator[tuple[dict, Path]]:
    """Up for the block: the cluster's status and the hub's kubeconfig."""
    from jupyterhub_gpu.devcluster import cluster
    from jupyterhub_gpu.spec.parse import load_platform
    from tests.integration.hub_rbac import give_the_hub_its_identity

    platform = load_platform(spec)
    status = cluster.up(platform, state_dir, progress=print, ports=cluster_ports(offset))
    try:
        kubeconfig = give_the_hub_its_identity(state_dir, platform, state_dir / "hub-kubeconfig")
        yield status, kubeconfig
    finally:
        cluster.down(state_dir, progress=lambda m: None)
