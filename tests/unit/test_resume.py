"""The gpu-resume hub service: what it finds to resume, and the environment JupyterHub
starts it with (computed by JupyterHub's own service launcher, not by hand)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from jupyterhub.objects import Hub
from jupyterhub.services.service import _ServiceSpawner, _MockUser
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader
from traitlets.config import Config

from jupyterhub_gpu import configure_hub
from jupyterhub_gpu.hub.resume import Resumable, resumable, server_path
from jupyterhub_gpu.contract import PROFILE_LABEL


def _service_env(platform_file) -> dict[str, str]:
    """The environment JupyterHub gives the managed service gpu-resume, as
    ``Service.start`` builds it (its spawner's ``get_env``)."""
    c = Config()
    configure_hub(c, str(platform_file))
    (service,) = c.JupyterHub.services
    spawner = _ServiceSpawner(cmd=service["command"], environment=service["environment"],
                              api_token="token", oauth_client_id="service-gpu-resume",
                              _service_name=service["name"], hub=Hub(),
                              user=_MockUser(name=""))
    return spawner.get_env()


@pytest.fixture
def in_the_hub_pod(monkeypatch, tmp_path):
    """The hub process's environment in its pod: the in-cluster service variables and
    no KUBECONFIG; the token and CA files the pod mounts (paths returned)."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("a-service-account-token")
    ca.write_text("not read by the loader")
    return token, ca


def test_the_service_reaches_the_api_with_the_in_cluster_config(in_the_hub_pod,
                                                                example_spec_path):
    token, ca = in_the_hub_pod
    env = _service_env(example_spec_path)
    assert "KUBECONFIG" not in env
    loaded = Configuration()
    InClusterConfigLoader(token_filename=str(token), cert_filename=str(ca),
                          environ=env).load_and_set(loaded)
    assert loaded.host == "https://10.0.0.1:443"
    assert loaded.api_key == {"BearerToken": "Bearer a-service-account-token"}


def test_the_service_gets_the_hubs_kubeconfig_when_it_has_one(monkeypatch, tmp_path,
                                                             example_spec_path):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    env = _service_env(example_spec_path)
    assert env["KUBECONFIG"] == str(tmp_path / "kubeconfig")
    assert "KUBERNETES_SERVICE_HOST" not in env


def _pod(user, phase="Pending", server="", deleting=False):
    meta = {"name": f"jupyter-{user}", "labels": {PROFILE_LABEL: "t4-shared"},
            "annotations": {"hub.jupyter.org/username": user,
                            "hub.jupyter.org/servername": server}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T10:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_resumable_are_the_waiting_pods_the_hub_does_not_know():
    pods = [_pod("alice"), _pod("bob"), _pod("carol", phase="Running"),
            _pod("dave", deleting=True), _pod("erin", server="big")]
    users = [{"name": "bob", "servers": {"": {"pending": "spawn"}}},
             {"name": "erin", "servers": {}}]
    assert [(r.user, r.server) for r in resumable(pods, users)] == [("alice", ""),
                                                                    ("erin", "big")]


def test_a_name_with_a_slash_is_one_segment_of_the_hub_api_path():
    """JupyterHub allows "/" in user names (some authenticators give such names): it
    must not move the request to another user's path of the hub API."""
    item = Resumable("team/alice", "big/../../bob", "t4-shared")
    assert server_path(item) == "/users/team%2Falice/servers/big%2F..%2F..%2Fbob"


def test_once_done_the_service_holds_no_hub_token(tmp_path):
    """The token JupyterHub gives gpu-resume may start any user's server and never
    expires: after its pass the service's process (the same pid, which JupyterHub
    watches) has it neither in its environment nor in its command line."""
    env = {**os.environ, "JUPYTERHUB_API_TOKEN": "the-hub-token",
           "JPY_API_TOKEN": "the-hub-token"}
    proc = subprocess.Popen([sys.executable, "-c",
                             "from jupyterhub_gpu.hub.resume import idle; idle()"], env=env)
    try:
        proc_dir = f"/proc/{proc.pid}"
        for _ in range(200):  # until the process image is the idle one
            with open(f"{proc_dir}/cmdline", "rb") as f:
                cmdline = f.read()
            if b"signal.pause" in cmdline:
                break
            time.sleep(0.05)
        assert b"signal.pause" in cmdline and proc.poll() is None
        with open(f"{proc_dir}/environ", "rb") as f:
            environ = f.read()
        assert b"the-hub-token" not in environ + cmdline
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == -signal.SIGTERM  # JupyterHub's stop ends it
