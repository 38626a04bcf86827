"""The usage page runs beside the hub, in the hub pod, in a container of its own that
holds no Kubernetes credentials (issue #25: services that need no Kubernetes access
don't get the hub's): what the Helm values give that container, how the hub config
registers it, and the real service process started as that container starts it.

The ServiceAccount admission plugin adds the token's volume mount to each container
that has no mount at ``/var/run/secrets/kubernetes.io/serviceaccount`` already
(kubernetes ``plugin/pkg/admission/serviceaccount/admission.go``,
``mountServiceAccountToken``), so an empty volume there keeps the token out of that
container alone; the hub's container still gets it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
import yaml
from traitlets.config import Config

from jupyterhub_gpu.spec.images import package_version
from jupyterhub_gpu.contract import USAGE_PORT
from jupyterhub_gpu.contract import (ENV_PROMETHEUS_URL, USAGE_ACCESS_SCOPE,
                                     USAGE_SERVICE_NAME)
from jupyterhub_gpu.usage.service import add_usage_service, sidecar_service

from .. import z2jh_chart

VERSION = package_version()  # the image tag: pyproject.toml's version, installed

VALUES = z2jh_chart.REPO / "helm-values" / "values.yaml"
Z2JH_VALUES = z2jh_chart.DEFAULT_VALUES
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SECRET_KEY = f"hub.services.{USAGE_SERVICE_NAME}.apiToken"  # z2jh's templates/hub/secret.yaml
KUBERNETES_ENV = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load(VALUES.read_text())


@pytest.fixture(scope="module")
def sidecar(values) -> dict:
    (container,) = [c for c in values["hub"]["extraContainers"]
                    if c["name"] == USAGE_SERVICE_NAME]
    return container


def z2jh_services(values: dict, token: str) -> list[dict]:
    """``c.JupyterHub.services`` as z2jh 4.4.0's jupyterhub_config.py leaves it before
    ``hub.extraConfig`` runs: one entry per ``hub.services`` key, named by it, with the
    api_token of the chart's Secret (files/hub/jupyterhub_config.py, "hub.services")."""
    return [{**service, "name": key, "api_token": token}
            for key, service in (values["hub"].get("services") or {}).items()]


def run_extra_config(values: dict, spec_path: Path, c: Config, monkeypatch,
                     get_config) -> Config:
    source = values["hub"]["extraConfig"]["00-jupyterhub-gpu"].replace(
        "/etc/jupyterhub-gpu/platform.yaml", str(spec_path))
    monkeypatch.setenv("POD_NAMESPACE", "jupyterhub")
    exec(source, {"c": c, "get_name": lambda name: name, "get_config": get_config,
                  "get_name_env": lambda name, suffix="": "8081"})
    return c


def test_the_hub_registers_the_sidecar_as_an_external_service(values, example_spec_path,
                                                              monkeypatch, get_config):
    c = Config()
    c.JupyterHub.services = z2jh_services(values, "chart-token")
    run_extra_config(values, example_spec_path, c, monkeypatch, get_config)
    (service,) = [s for s in c.JupyterHub.services if s["name"] == USAGE_SERVICE_NAME]
    assert service == {"name": USAGE_SERVICE_NAME, "api_token": "chart-token",
                       "url": f"http://hub.jupyterhub.svc.cluster.local:{USAGE_PORT}",
                       "oauth_no_confirm": True, "display": True}  # no command: not started
    (user,) = [r for r in c.JupyterHub.load_roles if r["name"] == "user"]
    assert USAGE_ACCESS_SCOPE in user["scopes"]


def test_a_sidecar_without_its_token_or_with_a_command_is_refused():
    with pytest.raises(ValueError, match=r"hub.services.gpu-usage: \{\}"):
        sidecar_service([{"name": "gpu-jobs", "api_token": "x"}], "http://hub:10102")
    with pytest.raises(ValueError, match="api_token"):
        sidecar_service([{"name": USAGE_SERVICE_NAME}], "http://hub:10102")
    with pytest.raises(ValueError, match="must not start it too"):
        sidecar_service([{"name": USAGE_SERVICE_NAME, "api_token": "x",
                          "command": ["python3"]}], "http://hub:10102")
    c = Config()
    c.JupyterHub.services = [{"name": USAGE_SERVICE_NAME, "api_token": "x"}]
    c.UsagePage.prometheus_url = "http://prom"
    with pytest.raises(ValueError, match="does not reach the gpu-usage sidecar"):
        add_usage_service(c, "/etc/p.yaml", "http://hub:10102", sidecar=True)


def test_the_sidecar_container_holds_no_kubernetes_credentials(values, sidecar):
    hub = values["hub"]
    volumes = {v["name"]: v for v in hub["extraVolumes"]}
    mounts = {m["mountPath"]: m for m in sidecar["volumeMounts"]}
    assert volumes[mounts[TOKEN_DIR]["name"]] == {"name": mounts[TOKEN_DIR]["name"],
                                                  "emptyDir": {}}
    assert not [e for e in sidecar.get("env", []) if e["name"] in KUBERNETES_ENV]
    assert not [v for v in hub["extraVolumes"] if "secret" in v or "projected" in v]
    (token,) = [e for e in sidecar["env"] if e["name"] == "JUPYTERHUB_API_TOKEN"]
    assert token["valueFrom"] == {"secretKeyRef": {"name": "hub", "key": SECRET_KEY}}
    assert USAGE_SERVICE_NAME in hub["services"]  # so z2jh puts that key in its Secret


def test_the_sidecar_runs_the_hub_image_as_the_hub_runs(values, sidecar):
    hub = values["hub"]
    image = yaml.safe_load((VALUES.parent / "generated.yaml").read_text())["hub"]["image"]
    assert sidecar["image"] == f"{image['name']}:{image['tag']}"
    assert sidecar["ports"] == [{"name": USAGE_SERVICE_NAME, "containerPort": USAGE_PORT}]
    assert {"name": USAGE_SERVICE_NAME, "port": USAGE_PORT,
            "targetPort": USAGE_PORT} in hub["service"]["extraPorts"]
    mounts = {m["mountPath"]: m for m in sidecar["volumeMounts"]}
    # the hub's working directory and volume (the chart mounts `pvc` there): the ledger
    assert mounts[sidecar["workingDir"]] == {"name": "pvc", "mountPath": "/srv/jupyterhub"}
    assert mounts["/etc/jupyterhub-gpu"] == {**hub["extraVolumeMounts"][0]}
    (prometheus,) = [e for e in sidecar["env"] if e["name"] == ENV_PROMETHEUS_URL]
    assert prometheus["value"] == hub["extraEnv"][ENV_PROMETHEUS_URL]
    if not Z2JH_VALUES.is_file():
        pytest.skip(f"z2jh reference values not found at {Z2JH_VALUES}")
    chart = yaml.safe_load(Z2JH_VALUES.read_text())["hub"]
    assert sidecar["securityContext"] == chart["containerSecurityContext"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _container_env(sidecar: dict, token: str) -> dict[str, str]:
    """The container's environment as the kubelet gives it (the Secret's value)."""
    return {e["name"]: token if "valueFrom" in e else e["value"] for e in sidecar["env"]}


async def test_the_sidecar_process_is_the_service_the_hub_registers(sidecar, tmp_path,
                                                                    example_spec_path):
    """The container's command, environment and working directory start the real
    service; unauthenticated, it sends the browser to the hub's OAuth as the client the
    hub registered for the service (JupyterHub's default ``service-<name>``,
    jupyterhub/services/service.py), with the service's own callback."""
    command = [sys.executable if w == "python3" else str(example_spec_path)
               if w.endswith("platform.yaml") else w for w in sidecar["command"]]
    port = _free_port()  # the container's port (10102) may be taken on this machine
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(z2jh_chart.REPO),
           **_container_env(sidecar, "sidecar-token"),
           "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}"}
    proc = await asyncio.create_subprocess_exec(*command, env=env, cwd=tmp_path,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        location = await _login_redirect(f"http://127.0.0.1:{port}/services/gpu-usage/", proc)
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
    finally:
        proc.terminate()
        await proc.wait()
    url = urlsplit(location)
    assert url.path == "/hub/api/oauth2/authorize"
    query = parse_qs(url.query)
    assert query["client_id"] == [f"service-{USAGE_SERVICE_NAME}"]
    assert query["redirect_uri"] == [f"/services/{USAGE_SERVICE_NAME}/oauth_callback"]
    names = {line.split(b"=", 1)[0].decode() for line in environ if line}
    assert not names & set(KUBERNETES_ENV)


async def _login_redirect(page: str, proc) -> str:
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            if proc.returncode is not None:
                raise AssertionError((await proc.stderr.read()).decode())
            try:
                async with http.get(page, allow_redirects=False) as r:
                    assert r.status == 302, await r.text()
                    return r.headers["Location"]
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.1)
    raise AssertionError(f"the sidecar did not answer at {page}")


def test_check_bundle_catches_a_sidecar_on_another_image(platform):
    from jupyterhub_gpu.bundle.checkhelm import check_helm

    files = [(name, yaml.safe_load((VALUES.parent / name).read_text()))
             for name in ("values.yaml", "generated.yaml", "auth-azuread.yaml")]
    assert check_helm(platform, files) == []
    (sidecar,) = [c for c in files[0][1]["hub"]["extraContainers"] if c["name"] == "gpu-usage"]
    sidecar["image"] = f"myregistry.azurecr.io/jupyterhub-gpu-hub:{VERSION}"
    (drift,) = check_helm(platform, files)
    assert drift.field.startswith("hub.extraContainers[") and drift.field.endswith("].image")
    assert (drift.file, drift.expected) == (
        "values.yaml", f"jupyterhubgpu.azurecr.io/jupyterhub-gpu-hub:{VERSION}")
