"""Every loopback port a cluster-tier run listens on, from its offset (pure: nothing
here starts anything, so the unit tier checks it: tests/unit/test_cluster_tier_ports.py).

A run's offset is ``$JUPYTERHUB_GPU_TEST_PORT_OFFSET`` (default 0), plus
:data:`WORKER_STRIDE` times the pytest-xdist worker's index when the tier runs on
several workers (``pytest -n N``: worker ``gwI`` brings up a dev cluster of its own on
:func:`worker_offset`). At one offset the run listens on:

- its dev cluster's ports, :meth:`Ports.shifted` (the defaults - 12000 + offset), and a
  second cluster's :data:`SECOND_CLUSTER_SHIFT` above them (test_demo_cleanup.py);
- the demo hub's (:func:`hub_ports`, the replay's ports shifted by the offset; its
  gpu-jobs, gpu-usage and gpu-kernels services above the hub's), and the second cluster's hub's;
- the z2jh chart hub's container ports, each at ``CHART_LOCAL_BASE + port % 1000``
  (:mod:`.chart_network`), inside ``CHART_LOCAL_SPAN`` ports.

Its dev cluster hands out pod IPs from :func:`~jupyterhub_gpu.devcluster.components.pod_cidr`
of its ports. For up to :data:`MAX_WORKERS` workers the workers' ports never meet, nor
the demo's (``make demo``: the default ports), nor those of a second run at
:data:`SECOND_RUN_OFFSET`, and stay below 32768; their pod CIDRs differ from each
other's and the demo's.
"""

from __future__ import annotations

from dataclasses import dataclass

from jupyterhub_gpu.devcluster.contract import (JOBS_PORT_ABOVE_HUB, KERNELS_PORT_ABOVE_HUB,
                                                USAGE_PORT_ABOVE_HUB)
from jupyterhub_gpu.devcluster.layout import Ports
from jupyterhub_gpu.replay.runcli import HUB_PORTS

ENV_OFFSET = "JUPYTERHUB_GPU_TEST_PORT_OFFSET"
#: worker gwI of ``pytest -n N`` runs at the run's offset + I * WORKER_STRIDE
WORKER_STRIDE = 1200
MAX_WORKERS = 4
#: a second run on the machine at this offset meets none of a run's at 0 (both with up
#: to MAX_WORKERS workers)
SECOND_RUN_OFFSET = 9500
#: test_demo_cleanup.py's own cluster and hub: this far above the run's
SECOND_CLUSTER_SHIFT = 50
#: the chart hub's container port ``p`` listens on CHART_LOCAL_BASE + p % 1000 + offset
CHART_LOCAL_BASE = 19000
CHART_LOCAL_SPAN = 200


@dataclass(frozen=True)
class HubPorts:
    """A demo hub's: the public URL's port, the hub's own and the proxy's API."""

    public: int
    hub: int
    proxy_api: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.public}"

    def start_args(self) -> dict[str, int]:
        """``hub_port=`` and ``proxy_api_port=``, as ``demo.serve``/``start_hub`` take them."""
        return {"hub_port": self.hub, "proxy_api_port": self.proxy_api}

    def listening(self) -> set[int]:
        return {self.public, self.hub, self.proxy_api, self.hub + JOBS_PORT_ABOVE_HUB,
                self.hub + USAGE_PORT_ABOVE_HUB, self.hub + KERNELS_PORT_ABOVE_HUB}


def worker_index(worker: str | None) -> int:
    """0 without xdist (``worker`` is ``$PYTEST_XDIST_WORKER``, e.g. ``gw1``)."""
    if not worker:
        return 0
    index = int(worker.removeprefix("gw"))
    if index >= MAX_WORKERS:
        raise ValueError(f"pytest-xdist worker {worker}: the cluster tier gives at most "
                         f"{MAX_WORKERS} workers ports of their own (pytest -n {MAX_WORKERS})")
    return index


def worker_offset(base: int, worker: str | None) -> int:
    return base + worker_index(worker) * WORKER_STRIDE


def hub_ports(offset: int) -> HubPorts:
    return HubPorts(HUB_PORTS["public"] + offset, HUB_PORTS["hub"] + offset,
                    HUB_PORTS["proxy_api"] + offset)


def chart_local_port(container_port: int, offset: int) -> int:
    return CHART_LOCAL_BASE + container_port % 1000 + offset


def listening(offset: int) -> set[int]:
    """Every port a run at ``offset`` may listen on (the chart's: its whole span)."""
    ports: set[int] = set()
    for shift in (0, SECOND_CLUSTER_SHIFT):
        ports |= set(Ports.shifted(offset + shift).as_dict().values())
        ports |= hub_ports(offset + shift).listening()
    return ports | set(range(CHART_LOCAL_BASE + offset,
                             CHART_LOCAL_BASE + CHART_LOCAL_SPAN + offset))
