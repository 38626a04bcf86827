"""The gpu-kernels service in a hub's config, as tests/unit/test_job_config.py checks
gpu-jobs': no role for the service, the one scope users and their servers' tokens
need, the servers' environment; and beside gpu-jobs, each keeps the other's."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from jupyterhub_gpu.contract import (ENV_JOBS_URL, ENV_KERNELS_BIND, ENV_KERNELS_URL,
                                     ENV_PLATFORM_FILE, ENV_POD_IP, JOBS_ACCESS_SCOPE, KERNELS_ACCESS_SCOPE,
                                     KERNELS_SERVICE_NAME)
from jupyterhub_gpu.jobs.config import add_jobs_service
from jupyterhub_gpu.kernels.config import add_kernels_service
from jupyterhub_gpu.services import SERVER_TOKEN_SCOPES


def test_a_hub_with_the_service(example_spec_path):
    c = Config()
    add_kernels_service(c, str(example_spec_path), "http://127.0.0.1:8094",
                        home_mount_path="/home/me")
    (service,) = c.JupyterHub.services
    assert service["name"] == KERNELS_SERVICE_NAME and service["url"] == "http://127.0.0.1:8094"
    assert service["command"][1:] == ["-m", "jupyterhub_gpu.kernels.service",
                                      "--home-mount-path=/home/me"]
    assert service["environment"][ENV_PLATFORM_FILE] == str(example_spec_path)
    assert ENV_KERNELS_BIND not in service["environment"]
    assert c.JupyterHub.load_roles == [{"name": "user", "scopes": ["self", KERNELS_ACCESS_SCOPE]}]
    assert c.KubeSpawner.server_token_scopes == [*SERVER_TOKEN_SCOPES, KERNELS_ACCESS_SCOPE]
    assert c.KubeSpawner.environment == {
        ENV_KERNELS_URL: "http://127.0.0.1:8094/services/gpu-kernels/",
        # the server's own address, which its kernels answer to
        ENV_POD_IP: {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}}


def test_beside_gpu_jobs_each_keeps_the_others_scope_and_url(example_spec_path):
    c = Config()
    add_jobs_service(c, str(example_spec_path), "http://hub:10101")
    add_kernels_service(c, str(example_spec_path), "http://hub:10104", bind="0.0.0.0")
    assert [s["name"] for s in c.JupyterHub.services] == ["gpu-jobs", KERNELS_SERVICE_NAME]
    assert c.JupyterHub.load_roles == [
        {"name": "user", "scopes": ["self", JOBS_ACCESS_SCOPE, KERNELS_ACCESS_SCOPE]}]
    assert c.KubeSpawner.server_token_scopes == [*SERVER_TOKEN_SCOPES, JOBS_ACCESS_SCOPE,
                                                 KERNELS_ACCESS_SCOPE]
    assert set(c.KubeSpawner.environment) == {ENV_JOBS_URL, ENV_KERNELS_URL, ENV_POD_IP}
    assert c.JupyterHub.services[1]["environment"][ENV_KERNELS_BIND] == "0.0.0.0"


def test_without_its_url_or_spec_it_says_what_it_needs_and_adds_nothing(example_spec_path):
    with pytest.raises(TypeError, match="needs url="):
        add_kernels_service(Config(), str(example_spec_path))
    c = Config()
    with pytest.raises(ValueError, match=r"call configure_hub\(c, <spec path>\) before it"):
        add_kernels_service(c, url="http://127.0.0.1:10104")
    assert c.JupyterHub.get("services", []) == []
