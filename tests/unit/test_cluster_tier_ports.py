"""The cluster tier split across pytest-xdist workers (``make test-cluster``: ``-n``),
each with a dev cluster and demo hubs of its own (tests/integration/ports.py): no two
workers of a run, nor a worker and ``make demo``, ever listen on one port or hand out
one pod IP, and every port stays below the kernel's ephemeral range."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import pytest

from jupyterhub_gpu.devcluster.components import pod_cidr
from jupyterhub_gpu.devcluster.contract import DEMO_HUB_PORT, DEMO_PROXY_API_PORT, DEMO_URL
from jupyterhub_gpu.devcluster.layout import Ports
from tests.integration import ports

DEMO = Ports()  # `make demo`: the default ports, and its hub's
DEMO_HUB = ports.HubPorts(urlsplit(DEMO_URL).port, DEMO_HUB_PORT, DEMO_PROXY_API_PORT)
EPHEMERAL_FROM = 32768  # net.ipv4.ip_local_port_range's default start
BASES = (0, ports.SECOND_RUN_OFFSET)


def _workers(n: int) -> list[str]:
    return [f"gw{i}" for i in range(n)]


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("n", range(1, ports.MAX_WORKERS + 1))
def test_the_workers_ports_never_meet_each_other_nor_the_demos(n, base):
    offsets = [ports.worker_offset(base, w) for w in _workers(n)]
    taken = set(DEMO.as_dict().values()) | DEMO_HUB.listening()
    for offset in offsets:
        mine = ports.listening(offset)
        assert not mine & taken, f"offset {offset} meets: {sorted(mine & taken)}"
        assert max(mine) < EPHEMERAL_FROM and min(mine) > 1024
        taken |= mine


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("n", range(1, ports.MAX_WORKERS + 1))
def test_the_workers_clusters_hand_out_pod_ips_of_their_own(n, base):
    nets = [ipaddress.ip_network(pod_cidr(Ports.shifted(ports.worker_offset(base, w))),
                                 strict=False) for w in _workers(n)]
    nets.append(ipaddress.ip_network(pod_cidr(DEMO), strict=False))
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:]), nets


def test_a_worker_beyond_the_last_is_refused_by_name():
    assert ports.worker_offset(500, None) == 500
    assert ports.worker_offset(500, "gw1") == 500 + ports.WORKER_STRIDE
    with pytest.raises(ValueError, match=f"worker gw{ports.MAX_WORKERS}: .* at most "
                                         f"{ports.MAX_WORKERS} workers"):
        ports.worker_offset(0, f"gw{ports.MAX_WORKERS}")


def test_the_demo_hub_and_the_tests_hubs_are_the_replays_ports_shifted():
    hub = ports.hub_ports(300)
    assert (hub.public, hub.hub, hub.proxy_api) == (18300, 18381, 18301)
    assert hub.url == "http://127.0.0.1:18300"
    assert hub.start_args() == {"hub_port": 18381, "proxy_api_port": 18301}
    assert hub.listening() == {18300, 18381, 18301, 18391, 18392, 18394}


@pytest.mark.parametrize("n", range(1, ports.MAX_WORKERS + 1))
def test_a_second_run_at_its_documented_offset_never_meets_the_first(n):
    def run(base):
        return set().union(*(ports.listening(ports.worker_offset(base, w)) for w in _workers(n)))

    assert not run(0) & run(ports.SECOND_RUN_OFFSET)
    nets = [ipaddress.ip_network(pod_cidr(Ports.shifted(ports.worker_offset(base, w))),
                                 strict=False)
            for base in (0, ports.SECOND_RUN_OFFSET) for w in _workers(n)]
    assert len(set(nets)) == len(nets), nets
