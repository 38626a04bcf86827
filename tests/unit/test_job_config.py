"""The gpu-jobs service in a hub's config: least privilege for the service, the one
scope users and their servers' tokens need, and the servers' environment."""

from __future__ import annotations

from traitlets.config import Config

from jupyterhub_gpu.contract import (ENV_JOBS_BIND, ENV_JOBS_URL, ENV_PLATFORM_FILE,
                                     JOBS_ACCESS_SCOPE, JOBS_SERVICE_NAME)
from jupyterhub_gpu.jobs.config import add_jobs_service
from jupyterhub_gpu.services import SERVER_TOKEN_SCOPES


def test_a_hub_with_the_service(example_spec_path):
    c = Config()
    add_jobs_service(c, str(example_spec_path), "http://127.0.0.1:8091",
                     job_annotations={"example.org/cost-center": "ml"},
                     home_mount_path="/home/me")
    (service,) = c.JupyterHub.services
    assert service["name"] == JOBS_SERVICE_NAME and service["url"] == "http://127.0.0.1:8091"
    assert service["command"][1:] == ["-m", "jupyterhub_gpu.jobs.service",
                                      "--job-annotation=example.org/cost-center=ml",
                                      "--home-mount-path=/home/me"]
    assert service["environment"][ENV_PLATFORM_FILE] == str(example_spec_path)
    assert ENV_JOBS_BIND not in service["environment"]
    # the service gets no role (JupyterHub answers who owns a token, groups included,
    # whatever the asker's scopes); users get the one scope that lets them call it
    assert c.JupyterHub.load_roles == [{"name": "user", "scopes": ["self", JOBS_ACCESS_SCOPE]}]
    assert c.KubeSpawner.server_token_scopes == [*SERVER_TOKEN_SCOPES, JOBS_ACCESS_SCOPE]
    assert c.KubeSpawner.environment == {
        ENV_JOBS_URL: "http://127.0.0.1:8091/services/gpu-jobs/"}


def test_an_admins_own_roles_scopes_and_environment_are_kept(example_spec_path):
    c = Config()
    c.JupyterHub.load_roles = [{"name": "user", "scopes": ["self", "read:groups"]},
                               {"name": "other", "scopes": ["list:users"]}]
    c.Spawner.server_token_scopes = ["access:servers!server"]
    c.Spawner.environment = {"A": "1"}
    c.KubeSpawner.environment = {"B": "2"}
    add_jobs_service(c, str(example_spec_path), "http://hub:10101", bind="0.0.0.0")
    assert c.JupyterHub.load_roles == [
        {"name": "user", "scopes": ["self", "read:groups", JOBS_ACCESS_SCOPE]},
        {"name": "other", "scopes": ["list:users"]}]
    assert c.KubeSpawner.server_token_scopes == ["access:servers!server", JOBS_ACCESS_SCOPE]
    assert c.KubeSpawner.environment == {"A": "1", "B": "2",
                                         ENV_JOBS_URL: "http://hub:10101/services/gpu-jobs/"}
    assert c.JupyterHub.services[0]["environment"][ENV_JOBS_BIND] == "0.0.0.0"
