"""The hub's shared watches have one home: one key function, KubeSpawner's, for every
namespace and kind, and one owner of the locks and failure times of the watches of
namespaces no spawn has started (jupyterhub_gpu.watches.namespaces)."""

from __future__ import annotations

import asyncio

import pytest
from kubespawner import KubeSpawner
from traitlets.config import Config

from jupyterhub_gpu.watches import namespaces
from jupyterhub_gpu.watches.namespaces import NamespaceWatches, reflector_key
from jupyterhub_gpu.watches.poolnodes import NodeReflector


@pytest.mark.parametrize("user_namespaces", [False, True])
@pytest.mark.parametrize("kind", ["pods", "workloads", "events"])
async def test_the_key_of_a_namespaces_watch_is_kubespawners_own(make_spawner, kind,
                                                          user_namespaces):
    """What KubeSpawner's ``_get_reflector_key`` returns for a spawner of that
    namespace (kubespawner 7.0.0 and 7.1.0, kubespawner/spawner.py: ``(kind, None)``
    with ``enable_user_namespaces``, else ``(kind, namespace)``); GPUSpawner's own key
    is the same."""
    user = make_spawner(spec=False).user
    for namespace in ("jhub-ml-eng", "jhub-data-science"):
        settings = {"namespace": namespace, "enable_user_namespaces": user_namespaces}
        kube = KubeSpawner(user=user, hub=make_spawner().hub,
                           config=Config({"KubeSpawner": settings}))
        gpu = make_spawner(config={"GPUSpawner": settings})
        assert reflector_key(kind, kube.namespace, user_namespaces) == \
            kube._get_reflector_key(kind) == gpu._get_reflector_key(kind)


async def test_the_node_watch_is_one_for_the_cluster(make_spawner):
    spawner = make_spawner(config={"GPUSpawner": {"namespace": "jhub-ml-eng"}})
    assert spawner._get_reflector_key(NodeReflector.kind) == (NodeReflector.kind, None) \
        == reflector_key(NodeReflector.kind, "jhub-data-science")


class Refused:
    """A watch whose first listing the API server refuses (no RBAC)."""

    made = 0

    def __init__(self, parent=None, namespace=None, **kwargs):
        Refused.made += 1
        self.first_load_future = asyncio.get_running_loop().create_future()

    async def start(self):
        raise RuntimeError("403 Forbidden")


async def test_the_watch_starter_keeps_one_entry_per_namespace_and_kind(make_spawner,
                                                                         monkeypatch):
    """Failed starts, retried over many retry periods, leave one lock and one failure
    time per namespace and kind; nothing else grows with the hub's lifetime."""
    clock = [1000.0]
    monkeypatch.setattr(namespaces.time, "monotonic", lambda: clock[0])
    spawner, starter, Refused.made = make_spawner(), NamespaceWatches(), 0
    keys = [(kind, ns) for kind in ("pods", "workloads") for ns in ("jhub-a", "jhub-b")]
    for _ in range(5):
        for kind, ns in keys:
            assert await starter.watch(spawner, kind, Refused, ns) is None
        clock[0] += namespaces.RETRY_SECONDS
    assert Refused.made == 5 * len(keys)
    assert set(starter._locks) == set(starter._failed_at) == set(keys)
    assert not any(key in spawner.reflectors for key in keys)


async def test_each_watch_starter_owns_its_failure_times(make_spawner):
    """The retry limit is the starter's own (the hub holds one), not a module's."""
    spawner, Refused.made = make_spawner(), 0
    assert await NamespaceWatches().watch(spawner, "pods", Refused, "jhub-a") is None
    assert await NamespaceWatches().watch(spawner, "pods", Refused, "jhub-a") is None
    assert Refused.made == 2


def test_every_watch_lives_in_the_watches_package(repo_root):
    """Issue #26: one home for the shared watches. A reflector class (a subclass of
    one of KubeSpawner's reflectors or of ours) defined anywhere else is a watch
    outside it."""
    import re

    package = repo_root / "jupyterhub_gpu"
    defined = {path.relative_to(package).as_posix(): name
               for path in package.rglob("*.py")
               for name in re.findall(r"^class (\w+)\([^)]*Reflector\b", path.read_text(),
                                      re.M)}
    assert defined and {path for path in defined if not path.startswith("watches/")} == set()
