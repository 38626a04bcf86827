"""The hub deployed from the real z2jh 4.4.0 chart (:mod:`.chart_hub`) survives a busy
queue: [aks] #28 item 3.

The chart's default ``hub.consecutiveFailureLimit: 5`` becomes
``c.Spawner.consecutive_failure_limit`` (z2jh 4.4.0,
``jupyterhub/files/hub/jupyterhub_config.py``), and JupyterHub aborts the hub after
that many failed spawns in a row (jupyterhub/jupyterhub 5.5,
``jupyterhub/handlers/base.py``, ``_track_failure_count``: ``SystemExit`` two seconds
after the limit is reached). A busy queue makes exactly such failures: every spawn that
runs out of its profile's queue patience while another user's server holds the pool's
only slice is one. Our values set ``hub.consecutiveFailureLimit: 0`` (helm-values/values.yaml
says why; ``check-bundle`` refuses any other value), so the hub keeps serving.

The hub runs in our hub image's Python environment (:mod:`.hub_image`: JupyterHub
5.5.0, as the hub pod on AKS), not also in this one's: JupyterHub 6's
``_track_failure_count`` exits the same way, and a second hub with six more failed
spawns would cost CI a minute for no new behaviour.
"""

from __future__ import annotations

import aiohttp
import pytest

from jupyterhub_gpu.devcluster import demo

from . import chart_hub, chart_hubapi, hub_image
from .conftest import wait_for

HOLDER, WAITER, GROUP = "lea-chart", "max-chart", "data-science"
IMPATIENT = "a100-mig-impatient"  # queuePatience 4s on the a100mig pool's one slice
FAILED_SPAWNS = 6  # one more than the chart's default consecutiveFailureLimit


@pytest.fixture(scope="module")
async def chart(cluster, cluster_spec_path, tmp_path_factory):
    async with chart_hub.serving(cluster, cluster_spec_path,
                                 tmp_path_factory.mktemp("chart-hub"),
                                 python_bin=hub_image.python_bin(hub_image.IMAGE_PINS)) as served:
        yield served


async def test_the_hub_keeps_running_through_a_busy_queues_timeouts(chart, spawn):
    hub, http = chart
    await spawn(HOLDER, [GROUP], "a100-mig-3g")  # holds the pool's only MIG slice
    await chart_hubapi.add_user(http, hub, WAITER, [GROUP])
    for attempt in range(1, FAILED_SPAWNS + 1):
        assert hub.running(), f"the hub exited before spawn {attempt}: {hub.tail()}"
        assert await chart_hubapi.start_server(http, hub, WAITER, IMPATIENT) in (201, 202)
        await wait_for(lambda: _gone(http, hub), timeout=60,
                       what=f"spawn {attempt} to run out of queue patience")
    assert hub.running() and await demo.hub_answers(http, hub.url), hub.tail()


async def _gone(http, hub) -> bool:
    """The waiter's spawn has failed (or the hub is gone, which the loop then reports)."""
    try:
        return not hub.running() or await chart_hubapi.server(http, hub, WAITER) is None
    except aiohttp.ClientError:
        return True

