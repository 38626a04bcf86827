"""The hub learns that an image cannot checkpoint on stop: its pods' preStop hook
leaves a termination message (see test_checkpoint.py), which the shared pod watch
reads and logs once per image."""

from __future__ import annotations

import logging

import pytest

from jupyterhub_gpu import checkpoint
from jupyterhub_gpu.watches.reflectors import RecordingPodReflector
from jupyterhub_gpu.kueue.status import checkpoint_unavailable

MESSAGE = f"{checkpoint.UNAVAILABLE}: the image has no python with the jupyterhub_gpu package\n"


def pod(name: str, image: str, message: str | None, state: str = "state") -> dict:
    terminated = {"exitCode": 0, "reason": "Completed"}
    if message is not None:
        terminated["message"] = message
    return {"metadata": {"name": name, "namespace": "jhub-ml-eng", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "notebook", "image": image}]},
            "status": {"containerStatuses": [{"name": "notebook", "image": f"docker.io/{image}",
                                              state: {"terminated": terminated}}]}}


def test_the_termination_message_names_the_image():
    assert checkpoint_unavailable(pod("a", "stock:1", MESSAGE)) == ("stock:1", MESSAGE.strip())
    assert checkpoint_unavailable(pod("a", "stock:1", MESSAGE, "lastState"))[0] == "stock:1"
    assert checkpoint_unavailable(pod("a", "ours:1", None)) is None
    assert checkpoint_unavailable(pod("a", "ours:1", "Error: OOMKilled")) is None
    running = pod("a", "ours:1", None)
    running["status"]["containerStatuses"][0]["state"] = {"running": {}}
    assert checkpoint_unavailable(running) is None
    assert checkpoint_unavailable({"metadata": {"name": "new"}, "spec": {}}) is None


@pytest.fixture
async def reflector(make_spawner):
    spawner = make_spawner()  # loads the (offline) kubeconfig the reflector's client needs
    return RecordingPodReflector(parent=spawner, namespace="jhub-ml-eng")


def warnings_about(caplog, image: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
            and f"Checkpoint-on-stop is unavailable for image {image} " in r.getMessage()]


async def test_the_pod_watch_logs_once_per_image(reflector, caplog):
    caplog.set_level(logging.WARNING)
    stock, other, ours = "quay.io/jupyter/stock:1", "quay.io/jupyter/other:2", "ours:1"
    # a full listing (the watch's first load, or a relist), then watch updates
    reflector.resources = {"jhub-ml-eng/a": pod("a", stock, MESSAGE),
                           "jhub-ml-eng/b": pod("b", ours, None)}
    reflector.resources["jhub-ml-eng/c"] = pod("c", stock, MESSAGE)
    reflector.resources["jhub-ml-eng/d"] = pod("d", other, MESSAGE)
    reflector.resources["jhub-ml-eng/b"] = pod("b", ours, "done")
    reflector.resources = {"jhub-ml-eng/e": pod("e", stock, MESSAGE)}
    (first,) = warnings_about(caplog, stock)
    assert "pod jhub-ml-eng/a" in first and "config/notebook.Dockerfile" in first
    assert len(warnings_about(caplog, other)) == 1
    assert warnings_about(caplog, ours) == []
