"""The gpu-kernels service in a hub's config, as tests/unit/test_job_config.py checks
gpu-jobs': no role for the service, the one scope users and their servers' tokens
need, the servers' environment, the usage ledger's URL; and beside gpu-jobs, each
keeps the other's."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from jupyterhub_gpu.builders.job import DEFAULT_HOME_MOUNT_PATH
from jupyterhub_gpu.contract import (ENV_JOBS_URL, ENV_KERNELS_BIND, ENV_KERNELS_URL,
                                     ENV_PLATFORM_FILE, ENV_POD_IP, ENV_USAGE_DB_URL,
                                     JOBS_ACCESS_SCOPE, KERNELS_ACCESS_SCOPE,
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


def test_the_service_gets_the_hubs_usage_ledger(example_spec_path, tmp_path, monkeypatch):
    """``c.UsageLedger.db_url`` reaches the service as it reaches gpu-jobs; unset, the
    SQLite file in the hub's working directory; the service reads it from there."""
    from jupyterhub_gpu.kernels import service as kernels_service

    monkeypatch.chdir(tmp_path)
    c = Config()
    add_kernels_service(c, str(example_spec_path), "http://hub:10104")
    add_jobs_service(c, str(example_spec_path), "http://hub:10101")
    urls = {s["environment"][ENV_USAGE_DB_URL] for s in c.JupyterHub.services}
    assert urls == {f"sqlite:///{tmp_path}/jupyterhub-gpu-usage.sqlite"}
    c = Config()
    c.UsageLedger.db_url = "postgresql+psycopg://hub@db/jupyterhub"
    add_kernels_service(c, str(example_spec_path), "http://hub:10104")
    env = c.JupyterHub.services[0]["environment"]
    assert env[ENV_USAGE_DB_URL] == c.UsageLedger.db_url
    served = []

    async def serve(*args):
        served.append(args)
    monkeypatch.setattr(kernels_service, "_serve", serve)
    monkeypatch.setenv(ENV_USAGE_DB_URL, env[ENV_USAGE_DB_URL])
    kernels_service.main(["--spec", str(example_spec_path)])
    assert served == [(str(example_spec_path), DEFAULT_HOME_MOUNT_PATH, c.UsageLedger.db_url)]
