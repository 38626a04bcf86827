"""Every hub service is added the same way: an ``add_*_service(c, ...)`` helper that
takes the spec's path from what ``configure_hub`` recorded in ``c``, so the Helm values'
``hub.extraConfig`` and the demo's hub config name that path once."""

from __future__ import annotations

import ast
import os

import pytest
import yaml
from traitlets.config import Config

from jupyterhub_gpu import configure_hub
from jupyterhub_gpu.contract import (ENV_PLATFORM_FILE, ENV_USAGE_DB_URL, JOBS_SERVICE_NAME,
                                     KERNELS_SERVICE_NAME, USAGE_SERVICE_NAME)
from jupyterhub_gpu.cull.service import (SERVICE_NAME as CULLER, add_culler_service,
                                         culler_role, culler_service)
from jupyterhub_gpu.devcluster.contract import ENV_DEMO_CHP, ENV_DEMO_SPEC
from jupyterhub_gpu.devcluster.demo import DEMO_CONFIG
from jupyterhub_gpu.hub.config import RESUME_SERVICE
from jupyterhub_gpu.jobs.config import add_jobs_service
from jupyterhub_gpu.kernels.config import add_kernels_service
from jupyterhub_gpu.usage.config import UsageLedger
from jupyterhub_gpu.usage.service import add_usage_service

from .chart_values import REPO, _load
from .test_usage_sidecar import run_extra_config, z2jh_services

VALUES = REPO / "helm-values" / "values.yaml"
CHART_SPEC = "/etc/jupyterhub-gpu/platform.yaml"


def extra_config() -> str:
    return _load(VALUES)["hub"]["extraConfig"]["00-jupyterhub-gpu"]


def spec_paths(c: Config) -> dict[str, str]:
    """Each managed service's spec path, as its process gets it (``--spec`` or the
    environment)."""
    paths = {}
    for service in c.JupyterHub.services:
        command = service.get("command", [])
        if "--spec" in command:
            paths[service["name"]] = command[command.index("--spec") + 1]
        elif ENV_PLATFORM_FILE in service.get("environment", {}):
            paths[service["name"]] = service["environment"][ENV_PLATFORM_FILE]
    return paths


def appends_to_the_hubs_lists(source: str) -> list[str]:
    """``c.JupyterHub.services.append(...)``-style calls: a service wired by hand."""
    return [ast.unparse(node.func) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend")
            and ast.unparse(node.func.value) in ("c.JupyterHub.services",
                                                 "c.JupyterHub.load_roles")]


def helpers_called(source: str) -> set[str]:
    return {node.func.id for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id.startswith("add_") and node.func.id.endswith("_service")}


def test_the_values_name_the_spec_path_once_and_every_service_reads_it(
        example_spec_path, monkeypatch, get_config):
    assert extra_config().count(CHART_SPEC) == 1
    values = _load(VALUES)
    c = Config()
    c.JupyterHub.services = z2jh_services(values, "t")
    run_extra_config(values, example_spec_path, c, monkeypatch, get_config)
    assert spec_paths(c) == {name: os.path.abspath(example_spec_path)
                             for name in (RESUME_SERVICE, CULLER, JOBS_SERVICE_NAME,
                                          KERNELS_SERVICE_NAME)}


def test_the_usage_sidecar_reads_the_spec_configure_hub_reads():
    """The one path outside ``hub.extraConfig``: the gpu-usage container's own command
    (another process, which the hub's config does not reach), kept equal to it."""
    (sidecar,) = [c for c in _load(VALUES)["hub"]["extraContainers"]
                  if c["name"] == USAGE_SERVICE_NAME]
    command = sidecar["command"]
    assert command[command.index("--spec") + 1] == CHART_SPEC
    assert f'configure_hub(c, "{CHART_SPEC}")' in extra_config()


def test_the_values_add_every_service_with_its_helper():
    source = extra_config()
    assert appends_to_the_hubs_lists(source) == []
    assert helpers_called(source) == {"add_culler_service", "add_jobs_service",
                                      "add_kernels_service", "add_usage_service"}


def test_the_check_finds_a_service_wired_by_hand():
    assert appends_to_the_hubs_lists("c.JupyterHub.load_roles.append(culler_role())") == [
        "c.JupyterHub.load_roles.append"]


def test_the_demo_adds_its_services_as_the_values_do(example_spec_path, monkeypatch):
    """The demo's hub config (run as JupyterHub runs it, with ``get_config``) calls the
    helpers the values call, and names the spec's path only in ``configure_hub``."""
    source = DEMO_CONFIG.read_text()
    assert helpers_called(extra_config()) <= helpers_called(source)
    assert source.count("[ENV_DEMO_SPEC]") == 1, "configure_hub alone reads the spec's path"
    monkeypatch.setenv(ENV_DEMO_SPEC, str(example_spec_path))
    monkeypatch.setenv(ENV_DEMO_CHP, "configurable-http-proxy")
    c = Config()
    exec(compile(source, str(DEMO_CONFIG), "exec"), {"get_config": lambda: c})
    assert spec_paths(c) == {name: os.path.abspath(example_spec_path)
                             for name in (RESUME_SERVICE, CULLER, JOBS_SERVICE_NAME,
                                          KERNELS_SERVICE_NAME, USAGE_SERVICE_NAME)}


def test_add_culler_service_adds_what_culler_service_and_culler_role_build(example_spec_path):
    c = Config()
    configure_hub(c, str(example_spec_path), resume=False)
    c.UsageLedger.db_url = "sqlite:////srv/ledger.sqlite"
    add_culler_service(c, prometheus_url="http://prometheus:9090", cull_every_seconds=30)
    assert c.JupyterHub.services == [culler_service(
        os.path.abspath(example_spec_path), prometheus_url="http://prometheus:9090",
        cull_every_seconds=30, usage_db_url="sqlite:////srv/ledger.sqlite")]
    assert c.JupyterHub.load_roles == [culler_role()]


def test_each_helper_takes_the_ledger_url_as_set_so_far(example_spec_path):
    c = Config()
    configure_hub(c, str(example_spec_path), resume=False)
    add_culler_service(c)
    add_jobs_service(c, url="http://127.0.0.1:10101")
    ledger = UsageLedger(config=c).db_url
    assert [s["environment"][ENV_USAGE_DB_URL] for s in c.JupyterHub.services] == [ledger] * 2


@pytest.mark.parametrize("add", [
    lambda c: add_culler_service(c),
    lambda c: add_jobs_service(c, url="http://127.0.0.1:10101"),
    lambda c: add_usage_service(c, url="http://127.0.0.1:10102"),
    lambda c: add_kernels_service(c, url="http://127.0.0.1:10104"),
])
def test_a_helper_before_configure_hub_says_what_it_needs_and_adds_nothing(add):
    c = Config()
    with pytest.raises(ValueError, match=r"call configure_hub\(c, <spec path>\) before it"):
        add(c)
    assert c.JupyterHub.get("services", []) == [] and c.JupyterHub.get("load_roles", []) == []


def test_a_helper_given_the_path_needs_no_configure_hub(example_spec_path):
    """The older call (the path, then the URL) still works."""
    c = Config()
    add_jobs_service(c, str(example_spec_path), "http://127.0.0.1:10101")
    add_culler_service(c, str(example_spec_path))
    assert set(spec_paths(c).values()) == {os.path.abspath(example_spec_path)}


@pytest.mark.parametrize("add", [add_jobs_service, add_usage_service, add_kernels_service])
def test_a_service_without_its_url_is_refused(add, example_spec_path):
    with pytest.raises(TypeError, match="needs url="):
        add(Config(), str(example_spec_path))


def admin_guide_culler_values() -> dict:
    """The admin guide's example of an admin's own values file that changes the
    culler's settings (section "The culler's settings")."""
    text = (REPO / "docs" / "admin-guide.md").read_text()
    section = text[text.index("### The culler's settings"):]
    block = section[section.index("```yaml\n") + len("```yaml\n"):]
    return yaml.safe_load(block[:block.index("```")])


def test_an_admins_later_extra_config_entry_replaces_the_culler_not_adds_one(
        example_spec_path, monkeypatch, get_config):
    """The values' ``00-jupyterhub-gpu``, then the admin guide's later entry (z2jh
    runs ``hub.extraConfig`` in key order): one culler, with the admin's settings, and
    its role once (JupyterHub refuses a role named twice at start-up)."""
    values = _load(VALUES)
    admin = admin_guide_culler_values()["hub"]["extraConfig"]
    assert sorted(["00-jupyterhub-gpu", *admin])[0] == "00-jupyterhub-gpu"
    c = Config()
    c.JupyterHub.services = z2jh_services(values, "t")
    run_extra_config(values, example_spec_path, c, monkeypatch, get_config)
    before = [s["name"] for s in c.JupyterHub.services]
    for source in admin.values():
        exec(source, {"c": c})
    assert [s["name"] for s in c.JupyterHub.services] == before  # the same place
    (culler,) = [s for s in c.JupyterHub.services if s["name"] == CULLER]
    assert {"--timeout=14400", "--cull-every=30"} <= set(culler["command"])
    assert [r["name"] for r in c.JupyterHub.load_roles].count(CULLER) == 1


def test_a_later_service_entry_keeps_what_the_chart_gave_the_earlier_one(example_spec_path):
    """A service the chart's ``hub.services`` named (with its api_token) and a helper
    then adds: one entry, with both."""
    c = Config()
    configure_hub(c, str(example_spec_path), resume=False)
    c.JupyterHub.services = [{"name": CULLER, "api_token": "from-the-chart"}]
    add_culler_service(c)
    (entry,) = c.JupyterHub.services
    assert entry["api_token"] == "from-the-chart" and "command" in entry
