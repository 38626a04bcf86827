"""The availability API's thin layer: its routes in the hub's config, and how it starts
the shared watches (one per namespace and kind, the spawns' own, retried at most
every RETRY_SECONDS). Against a real hub and cluster: tests/integration/
test_availability.py."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from kubespawner import KubeSpawner
from traitlets.config import Config

from jupyterhub_gpu import configure_hub
from jupyterhub_gpu.hub import api as hubapi
from jupyterhub_gpu.hub.form import render_form, user_profiles_url
from jupyterhub_gpu.hub.spawner import GPUSpawner
from jupyterhub_gpu.watches import namespaces as watches
from jupyterhub_gpu.watches.namespaces import NamespaceWatches
from jupyterhub_gpu.watches.reflectors import RecordingPodReflector

NS = "jhub-test-watch"


class Reflector:
    """What KubeSpawner's reflectors offer the layer: start(), the first listing, the
    watch task. ``fail``: the listing is refused (no RBAC)."""

    made: list["Reflector"] = []
    fail = False

    def __init__(self, parent=None, namespace=None, **kwargs):
        self.parent, self.namespace, self.kwargs = parent, namespace, kwargs
        self.resources = {}
        self.first_load_future = asyncio.get_running_loop().create_future()
        self.watch_task = None
        self.stopped = False
        Reflector.made.append(self)

    async def start(self):
        await asyncio.sleep(0)
        if Reflector.fail:
            self.first_load_future.set_exception(RuntimeError("403 Forbidden"))
            self.first_load_future.exception()
            raise RuntimeError("403 Forbidden")
        self.first_load_future.set_result(None)
        self.watch_task = asyncio.ensure_future(asyncio.Event().wait())

    async def stop(self):
        self.stopped = True
        if self.watch_task:
            self.watch_task.cancel()


@pytest.fixture
async def spawner(make_spawner):
    Reflector.made, Reflector.fail = [], False
    spawner = make_spawner()
    yield spawner
    for key in [k for k in spawner.reflectors if k[1] == NS]:
        reflector = spawner.reflectors.pop(key)
        if reflector.watch_task:
            reflector.watch_task.cancel()
    GPUSpawner.namespace_watches = NamespaceWatches()  # forget the failures seen here


async def test_one_watch_per_namespace_however_many_ask(spawner):
    found = await asyncio.gather(*(spawner.namespace_watches.watch(spawner, "pods", Reflector, NS,
                                                           labels={"a": "b"})
                                   for _ in range(5)))
    assert len(Reflector.made) == 1 and all(r is Reflector.made[0] for r in found)
    assert spawner.reflectors[("pods", NS)] is found[0]
    assert (found[0].namespace, found[0].kwargs, found[0].parent) == (NS, {"labels": {"a": "b"}},
                                                                      spawner)


async def test_a_watch_that_cannot_start_is_retried_at_most_every_minute(
        spawner, monkeypatch, caplog):
    clock = [1000.0]
    monkeypatch.setattr(watches.time, "monotonic", lambda: clock[0])
    Reflector.fail = True
    caplog.set_level(logging.WARNING)
    assert await spawner.namespace_watches.watch(spawner, "pods", Reflector, NS) is None
    assert ("pods", NS) not in spawner.reflectors, "a spawn there starts its own"
    assert "Cannot watch pods in namespace jhub-test-watch (403 Forbidden)" in caplog.text
    clock[0] += watches.RETRY_SECONDS - 1
    assert await spawner.namespace_watches.watch(spawner, "pods", Reflector, NS) is None
    assert len(Reflector.made) == 1, "no second call within the minute"
    Reflector.fail = False
    clock[0] += 1
    again = await spawner.namespace_watches.watch(spawner, "pods", Reflector, NS)
    assert again is Reflector.made[1]


async def test_a_failed_watch_of_a_spawn_is_replaced(spawner):
    first = await spawner.namespace_watches.watch(spawner, "pods", Reflector, NS)
    first.watch_task.cancel()  # KubeSpawner's reflector gave up after its retries
    await asyncio.sleep(0)
    second = await spawner.namespace_watches.watch(spawner, "pods", Reflector, NS)
    assert second is not first and first.stopped and spawner.reflectors[("pods", NS)] is second


async def test_the_pod_watch_is_the_one_a_spawn_in_that_namespace_uses(make_spawner, monkeypatch):
    """Same key (KubeSpawner's ``_get_reflector_key``), class and labels as
    ``GPUSpawner._start_watching_pods``: a spawn reuses the API's watch, and the API a
    spawn's."""
    started = []

    async def start_reflector(self, kind, reflector_class, replace=False, **kwargs):
        started.append((self._get_reflector_key(kind), reflector_class, kwargs))

    monkeypatch.setattr(KubeSpawner, "_start_reflector", start_reflector)
    spawner = make_spawner()
    spawner.apply_profile({"profile": "t4-shared"})
    await spawner._start_watching_pods()
    ((key, cls, kwargs),) = started
    assert key == ("pods", spawner.namespace) == ("pods", "jhub-data-science")
    assert cls is RecordingPodReflector and kwargs.pop("omit_namespace") is False
    seen = []

    async def watch(spawner, kind, reflector_class, namespace, **kwargs):
        seen.append(((kind, namespace), reflector_class, kwargs))

    monkeypatch.setattr(spawner.namespace_watches, "watch", watch)
    monkeypatch.setattr(hubapi, "_node_watch", lambda spawner: asyncio.sleep(0))
    platform = spawner.platform
    await hubapi.cluster_now(spawner, platform, platform.teams[0])
    assert (key, cls, kwargs) in seen


def test_configure_hub_adds_the_routes_under_the_hub_prefix(example_spec_path):
    c = Config()
    configure_hub(c, str(example_spec_path), resume=False)
    routes = dict(c.JupyterHub.extra_handlers)
    assert routes[r"/api/gpu/profiles"] is hubapi.OwnProfilesHandler
    user = next(r for r, h in routes.items() if h is hubapi.UserProfilesHandler)
    assert re.fullmatch(user, "/api/gpu/users/al%20ice/profiles").group(1) == "al%20ice"


def test_the_form_asks_the_users_own_url(platform):
    url = user_profiles_url("/prefix/hub/", "al ice")
    assert url == "/prefix/hub/api/gpu/users/al%20ice/profiles"
    form = render_form(platform, frozenset({"data-science"}), None, None, url)
    assert f'var url = "{url}";' in form and 'id="availability-cpu"' in form
    assert "window.setInterval(ask, 15000)" in form
    bare = render_form(platform, frozenset({"data-science"}), None)
    assert "<script>" not in bare and "id=\"availability-" not in bare


@pytest.mark.asyncio(loop_scope="function")  # see the refusing_api fixture
async def test_without_a_node_watch_the_nodes_are_unknown(make_spawner, refusing_api, caplog):
    """The spawner's API address refuses every connection: the node watch's first
    listing fails, as it does without the hub's ClusterRole."""
    from jupyterhub_gpu.watches.poolnodes import NodeReflector

    spawner = make_spawner(config=refusing_api)
    key = spawner._get_reflector_key(NodeReflector.kind)
    caplog.set_level(logging.WARNING)
    try:
        assert await hubapi._node_watch(spawner) is None
        assert "Cannot watch the cluster's nodes" in caplog.text
    finally:
        spawner.reflectors.pop(key, None)
