"""The resuming watch's pure parts; its behaviour against a real API server (resume
with no LIST, relist once on 410 or a reset) is in
tests/integration/test_apiserver_faults.py and the benchmarks' idle request count."""

from jupyterhub_gpu.watches.reflectors import WorkloadReflector
from jupyterhub_gpu.watches.poolnodes import NodeReflector
from jupyterhub_gpu.watches.resuming import WATCH_SECONDS, ResumesWatch, apply_event


def _event(kind: str, name: str, version: str, namespace: str = "ns") -> dict:
    return {"type": kind, "raw_object": {"metadata": {
        "name": name, "namespace": namespace, "resourceVersion": version}}}


def test_events_update_the_store_and_every_one_moves_the_resource_version():
    resources: dict = {}
    assert apply_event(resources, _event("ADDED", "a", "5")) == "5"
    assert apply_event(resources, _event("MODIFIED", "a", "6")) == "6"
    assert resources["ns/a"]["metadata"]["resourceVersion"] == "6"
    assert apply_event(resources, _event("DELETED", "a", "7")) == "7"  # deletes too
    assert resources == {}


def test_a_bookmark_moves_the_resource_version_and_stores_nothing():
    resources = {"ns/a": {"metadata": {"name": "a"}}}
    bookmark = {"type": "BOOKMARK", "raw_object": {"metadata": {"resourceVersion": "90"}}}
    assert apply_event(resources, bookmark) == "90"
    assert list(resources) == ["ns/a"]


async def test_watch_requests_last_minutes_with_bookmarks_from_the_version_given(
        offline_kubeconfig):
    reflector = WorkloadReflector(namespace="jhub-ml-eng")
    timeouts = set()
    for _ in range(50):
        args = reflector._watch_args("42")
        assert args["resource_version"] == "42" and args["allow_watch_bookmarks"]
        assert args["namespace"] == "jhub-ml-eng"
        assert args["_request_timeout"] > args["timeout_seconds"]  # the server ends it
        timeouts.add(args["timeout_seconds"])
    assert min(timeouts) >= WATCH_SECONDS[0] >= 300 and max(timeouts) <= WATCH_SECONDS[1]
    assert len(timeouts) > 1, "randomized, so the hub's watches do not restart together"


async def test_the_node_watch_has_no_namespace_and_resumes_too(offline_kubeconfig):
    assert issubclass(NodeReflector, ResumesWatch)
    assert "namespace" not in NodeReflector()._watch_args("1")


async def test_stop_ends_the_watch_task_quietly_even_mid_request(offline_kubeconfig):
    """KubeSpawner's ``stop()`` sets ``_stopping``, cancels the watch task and awaits
    it: a task cancelled in the middle of a minutes-long watch request must end, not
    raise CancelledError into the caller (a hub stopping its reflectors)."""
    import asyncio

    reflector = WorkloadReflector(namespace="jhub-ml-eng")
    in_request = asyncio.Event()

    async def long_request(version):
        in_request.set()
        await asyncio.sleep(3600)

    reflector._listed_version = "1"
    reflector._watch_from = long_request
    reflector.watch_task = asyncio.create_task(reflector._watch_and_update())
    await in_request.wait()
    await reflector.stop()  # raises CancelledError without the fix
    assert reflector.watch_task is None
