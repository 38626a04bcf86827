"""The z2jh Helm values: every file validates against the z2jh 4.4.0 values schema
(as Helm validates it: the chart's defaults with the file merged in), and the values
wire the spec and let GPU pools scale to zero."""

from __future__ import annotations


import jsonschema
import pytest
import yaml

from jupyterhub_gpu.bundle.checkhelm import CHART_HOME_ACCESS_MODES, check_helm, get, merge_values
from jupyterhub_gpu.bundle.monitoring import KPS_NAMESPACE, PROMETHEUS_POD_LABELS
from jupyterhub_gpu.bundle.namespaces import HubRef
from jupyterhub_gpu.spec.parse import load_platform

from .test_usage_sidecar import z2jh_services

from .chart_values import INSTALL_ORDER, REPO, VALUES, _load


def _errors(z2jh, *files: dict) -> list[str]:
    schema, defaults = z2jh
    merged = merge_values([("chart", defaults), *(("file", f) for f in files)])
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in validator.iter_errors(merged)]




def test_the_install_command_names_every_values_file():
    assert sorted(p.name for p in VALUES) == sorted(INSTALL_ORDER)


@pytest.mark.parametrize("path", VALUES, ids=lambda p: p.name)
def test_values_file_matches_the_z2jh_schema(z2jh, path):
    assert _errors(z2jh, _load(path)) == []


def test_all_values_files_together_match_the_schema(z2jh):
    assert _errors(z2jh, *(_load(REPO / "helm-values" / n) for n in INSTALL_ORDER)) == []


def test_schema_catches_a_misplaced_key(z2jh):
    """The check has teeth: a key z2jh does not know is an error, as in `helm install`."""
    values = _load(REPO / "helm-values" / "values.yaml")
    values["singleuser"]["startTimeOut"] = 600
    assert any("startTimeOut" in e for e in _errors(z2jh, values))


def test_committed_values_pass_the_bundle_check(platform):
    files = [(n, _load(REPO / "helm-values" / n)) for n in INSTALL_ORDER]
    assert check_helm(platform, files) == []


def test_values_wire_the_spawner_and_keep_gpu_pools_free():
    values = merge_values([(n, _load(REPO / "helm-values" / n)) for n in INSTALL_ORDER])
    config = get(values, "hub.extraConfig.00-jupyterhub-gpu")
    assert 'configure_hub(c, "/etc/jupyterhub-gpu/platform.yaml")' in config
    assert "c.JupyterHub.hub_connect_url" in config and ".svc.cluster.local" in config
    assert {"name": "jupyterhub-gpu-platform",
            "configMap": {"name": "jupyterhub-gpu-platform"}} in get(values, "hub.extraVolumes")
    assert get(values, "cull.enabled") is False
    assert get(values, "scheduling.userPlaceholder.enabled") is False
    assert get(values, "prePuller.hook.enabled") is False
    assert get(values, "scheduling.userPods.nodeAffinity.matchNodePurpose") == "prefer"
    assert get(values, "hub.image.name") != "quay.io/jupyterhub/k8s-hub"


def test_extra_config_is_valid_python():
    values = _load(REPO / "helm-values" / "values.yaml")
    for name, source in values["hub"]["extraConfig"].items():
        compile(source, name, "exec")


def test_extra_config_runs_as_z2jh_runs_it(example_spec_path, monkeypatch, get_config):
    """z2jh exec()s each extraConfig entry with get_name/get_name_env in scope."""
    from traitlets.config import Config

    from jupyterhub_gpu.hub.spawner import GPUSpawner

    source = _load(REPO / "helm-values" / "values.yaml")["hub"]["extraConfig"]["00-jupyterhub-gpu"]
    source = source.replace("/etc/jupyterhub-gpu/platform.yaml", str(example_spec_path))
    monkeypatch.setenv("POD_NAMESPACE", "jupyterhub")
    monkeypatch.setenv("HUB_SERVICE_PORT", "8081")
    c = Config()
    c.JupyterHub.services = z2jh_services(_load(REPO / "helm-values" / "values.yaml"), "t")
    exec(source, {"c": c, "get_name": lambda name: name, "get_config": get_config,
                  "get_name_env": lambda name, suffix="": __import__("os").environ[
                      (name + suffix).upper().replace("-", "_")]})
    assert c.JupyterHub.spawner_class is GPUSpawner
    assert c.GPUSpawner.platform_file == str(example_spec_path)
    assert c.JupyterHub.hub_connect_url == "http://hub.jupyterhub.svc.cluster.local:8081"
    from jupyterhub_gpu.hub.api import handlers

    assert c.JupyterHub.extra_handlers == handlers(), "the availability API the form polls"


def _run_extra_config(spec_path, monkeypatch, get_config, environment=None):
    """The chart's values, and the hub's config after z2jh exec()s our extraConfig with
    the example spec (``environment``: the chart's singleuser.extraEnv, if any)."""
    from traitlets.config import Config

    values = _load(REPO / "helm-values" / "values.yaml")
    source = values["hub"]["extraConfig"]["00-jupyterhub-gpu"].replace(
        "/etc/jupyterhub-gpu/platform.yaml", str(spec_path))
    monkeypatch.setenv("POD_NAMESPACE", "jupyterhub")
    monkeypatch.setenv("HUB_SERVICE_PORT", "8081")
    c = Config()
    c.JupyterHub.services = z2jh_services(values, "t")
    if environment is not None:
        c.KubeSpawner.environment = environment
    exec(source, {"c": c, "get_name": lambda name: name, "get_config": get_config,
                  "get_name_env": lambda name, suffix="": "8081"})
    return values, c


def test_the_chart_runs_the_jobs_service_where_notebooks_reach_it(example_spec_path,
                                                                  monkeypatch, get_config):
    """The gpu-jobs service listens in the hub pod on the port the hub Service adds and
    the hub's NetworkPolicy opens to the team namespaces (whose own policy lets
    notebooks out to it); servers get its URL and a token that may call it."""

    from jupyterhub_gpu.bundle.namespaces import network_policy
    from jupyterhub_gpu.contract import JOBS_PORT
    from jupyterhub_gpu.contract import ENV_JOBS_URL, JOBS_ACCESS_SCOPE

    values, c = _run_extra_config(example_spec_path, monkeypatch, get_config,
                                  {"FROM_EXTRA_ENV": "1"})  # the chart's singleuser.extraEnv
    (service,) = [s for s in c.JupyterHub.services if s["name"] == "gpu-jobs"]
    assert service["url"] == f"http://hub.jupyterhub.svc.cluster.local:{JOBS_PORT}"
    # a job's home is the claim notebooks mount where the chart mounts the home
    assert f"--home-mount-path={get_config('singleuser.storage.homeMountPath')}" in (
        service["command"])
    assert c.KubeSpawner.environment["FROM_EXTRA_ENV"] == "1"  # kept
    assert c.KubeSpawner.environment[ENV_JOBS_URL] == (
        f"http://hub.jupyterhub.svc.cluster.local:{JOBS_PORT}/services/gpu-jobs/")
    assert JOBS_ACCESS_SCOPE in c.KubeSpawner.server_token_scopes
    (user,) = [r for r in c.JupyterHub.load_roles if r["name"] == "user"]
    assert JOBS_ACCESS_SCOPE in user["scopes"] and "self" in user["scopes"]
    assert {"name": "gpu-jobs", "port": JOBS_PORT,
            "targetPort": JOBS_PORT} in values["hub"]["service"]["extraPorts"]
    assert any(p == {"port": JOBS_PORT} for rule in values["hub"]["networkPolicy"]["ingress"]
               for p in rule["ports"])
    team = load_platform(example_spec_path).teams[0]
    (to_hub, *_) = network_policy(team, HubRef())["spec"]["egress"]
    assert {"port": JOBS_PORT} in to_hub["ports"]


def test_the_chart_runs_the_kernels_service_where_servers_reach_it(example_spec_path,
                                                                   monkeypatch, get_config):
    """The gpu-kernels service listens in the hub pod on the port the hub Service adds
    and the hub's NetworkPolicy opens to the team namespaces' user servers (not to
    their GPU kernels, nor jobs) and to the proxy; the team namespaces let servers out
    to it, and kernels not; servers get its URL and a token that may call it."""

    from jupyterhub_gpu.bundle.namespaces import kernels_policy, network_policy
    from jupyterhub_gpu.contract import (ENV_KERNELS_URL, KERNELS_ACCESS_SCOPE, KERNELS_PORT,
                                         KERNELS_SERVICE_NAME)

    values, c = _run_extra_config(example_spec_path, monkeypatch, get_config)
    (service,) = [s for s in c.JupyterHub.services if s["name"] == KERNELS_SERVICE_NAME]
    url = f"http://hub.jupyterhub.svc.cluster.local:{KERNELS_PORT}"
    assert service["url"] == url
    assert f"--home-mount-path={get_config('singleuser.storage.homeMountPath')}" in (
        service["command"])
    assert c.KubeSpawner.environment[ENV_KERNELS_URL] == f"{url}/services/{KERNELS_SERVICE_NAME}/"
    assert KERNELS_ACCESS_SCOPE in c.KubeSpawner.server_token_scopes
    (user,) = [r for r in c.JupyterHub.load_roles if r["name"] == "user"]
    assert KERNELS_ACCESS_SCOPE in user["scopes"]
    assert {"name": KERNELS_SERVICE_NAME, "port": KERNELS_PORT,
            "targetPort": KERNELS_PORT} in values["hub"]["service"]["extraPorts"]
    rules = [r["from"] for r in values["hub"]["networkPolicy"]["ingress"]
             if {"port": KERNELS_PORT} in r["ports"]]
    assert rules == [  # servers and the proxy call it; Prometheus scrapes its metrics
        [{"namespaceSelector": {"matchLabels": {"jupyterhub-gpu/managed": "true"}},
          "podSelector": {"matchLabels": {"component": "singleuser-server"}}},
         {"podSelector": {"matchLabels": {"component": "proxy"}}}],
        [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": KPS_NAMESPACE}},
          "podSelector": {"matchLabels": PROMETHEUS_POD_LABELS}}]]
    team = load_platform(example_spec_path).teams[0]
    (to_hub, *_) = network_policy(team, HubRef())["spec"]["egress"]
    assert {"port": KERNELS_PORT} in to_hub["ports"]
    # a kernel's pod reaches no port of the hub (test_builders_kernel.py)
    assert not any(peer.get("podSelector") for rule in kernels_policy(team)["spec"]["egress"]
                   for peer in rule.get("to", []))


def test_the_chart_runs_the_usage_page_where_the_proxy_reaches_it(example_spec_path,
                                                                 monkeypatch, get_config):
    """The gpu-usage service listens in the hub pod (its own container there:
    test_usage_sidecar.py) on a port the hub Service adds and the hub's NetworkPolicy
    opens to the proxy alone; every user may open it."""

    from jupyterhub_gpu.contract import USAGE_PORT
    from jupyterhub_gpu.contract import USAGE_ACCESS_SCOPE, USAGE_SERVICE_NAME

    values, c = _run_extra_config(example_spec_path, monkeypatch, get_config)
    (service,) = [s for s in c.JupyterHub.services if s["name"] == USAGE_SERVICE_NAME]
    assert service["url"] == f"http://hub.jupyterhub.svc.cluster.local:{USAGE_PORT}"
    (user,) = [r for r in c.JupyterHub.load_roles if r["name"] == "user"]
    assert USAGE_ACCESS_SCOPE in user["scopes"]
    assert {"name": USAGE_SERVICE_NAME, "port": USAGE_PORT,
            "targetPort": USAGE_PORT} in values["hub"]["service"]["extraPorts"]
    (rule,) = [r for r in values["hub"]["networkPolicy"]["ingress"]
               if {"port": USAGE_PORT} in r["ports"]]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"component": "proxy"}}}]


def test_the_home_check_knows_the_charts_defaults(z2jh):
    """check-bundle's defaults for an unset home (checkhelm._homes) are the chart's: its
    access modes, and no pvcNameTemplate (KubeSpawner's own then applies; the chart's
    files/hub/jupyterhub_config.py passes one only when set)."""
    _, defaults = z2jh
    assert get(defaults, "singleuser.storage.dynamic.storageAccessModes") == \
        CHART_HOME_ACCESS_MODES
    assert get(defaults, "singleuser.storage.dynamic.pvcNameTemplate") is None


def test_the_admin_guide_shows_the_homes_the_values_give():
    guide = (REPO / "docs" / "admin-guide.md").read_text()
    section = guide.split("### Homes: one Azure Files share per user")[1]
    shown = yaml.safe_load(section.split("```yaml\n")[1].split("```")[0])
    values = _load(REPO / "helm-values" / "values.yaml")
    assert shown["singleuser"]["storage"] == values["singleuser"]["storage"]


def test_the_chart_tolerates_the_taint_that_keeps_system_pods_off_cpu_pools(z2jh, platform):
    """Every pool is tainted, CPU-only pools with z2jh's user taint: kube-system pods
    do not tolerate it, so none lands on a CPU node and pins it (the cluster
    autoscaler's skip-nodes-with-system-pods, on in main.tf), while z2jh's user pods
    and image pullers tolerate it by default (z2jh values.yaml,
    scheduling.userPods.tolerations)."""
    from jupyterhub_gpu.spec.model import USER_TAINT

    assert all(pool.taints for pool in platform.pools)
    cpu = [pool for pool in platform.pools if not pool.has_gpu]
    assert cpu and all(USER_TAINT in pool.taints for pool in cpu)
    assert USER_TAINT.toleration() in get(z2jh[1], "scheduling.userPods.tolerations")
