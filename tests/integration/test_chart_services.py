"""The hub deployed from the real z2jh 4.4.0 chart (:mod:`.chart_hub`) with its
Kubernetes identity and its managed services: [fidelity] #27 item 1.

* **RBAC.** The hub runs as the chart's ServiceAccount ``hub`` with the token the
  kubelet would mount, bound by exactly what an admin applies: the chart's Role and
  RoleBinding (z2jh 4.4.0, ``jupyterhub/templates/hub/rbac.yaml``) and the bundle's
  ``config/team-namespaces.yaml`` (rendered for the cluster spec), beside the API
  server's own default bindings. Through it a server starts and stops in a team
  namespace (the API server's audit log names the ServiceAccount), and the real API
  server refuses that token what the hub must not do. (tests/integration/test_rbac.py
  takes single verbs away from the same RBAC under the demo hub.)
* **The culler.** Our GPU-aware culler is the chart hub's managed service, added by the
  values' ``hub.extraConfig`` ``00-jupyterhub-gpu`` (the chart's own ``cull`` is off),
  made fast the way the admin guide tells an admin to change its settings: a later
  ``hub.extraConfig`` entry in the admin's own values file calling
  ``add_culler_service`` again (``cull_every_seconds``); the profile's short
  ``idleTimeout`` (``t4-quick``, 10 s) comes from the spec. It culls an idle server.
* **gpu-resume.** ``configure_hub``'s service (jupyterhub_gpu/hub/resume.py) lists the
  team namespaces' pods with the hub's in-cluster config (the chart hub's environment
  has no kubeconfig), and after the hub container is killed and restarted, resumes a
  server that was waiting in the queue, on the same pod and Workload.

Both services are the hub's children in the pod's PID and mount namespaces, with the
environment the hub gives them from the chart's (the spec at the chart's mount path,
the Prometheus URL of ``hub.extraEnv``). The values' Prometheus URL names a Service of
another namespace, which nothing resolves here (no cluster DNS): the admin's file points
``hub.extraEnv`` at the dev cluster's Prometheus instead.

The hub and its services run in our hub image's Python environment (:mod:`.hub_image`:
JupyterHub 5.5.0, KubeSpawner 7.0.0, jupyterhub-idle-culler 2.x), as on AKS.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.cull.service import SERVICE_NAME as CULLER
from jupyterhub_gpu.devcluster import demo, procs
from jupyterhub_gpu.hub import resume
from tests import z2jh_chart

from . import chart_hub, chart_hubapi, hub_image, hub_rbac
from .audit import AuditLog
from .conftest import STATE_DIR, TEST_PORTS, wait_for
from .test_demo import _queued

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not z2jh_chart.CHART.is_dir(),
                       reason=f"z2jh chart not found at {z2jh_chart.CHART}: the chart is "
                              f"needed beside the checkout"),
]

HUB = hub_rbac.HUB
IDENTITY = hub_rbac.IDENTITY
CULL_EVERY = 2
PROMETHEUS_URL = f"http://127.0.0.1:{TEST_PORTS.prometheus}"
#: the admin's own values file: the culler's settings as the admin guide says to change
#: them ("The culler's settings"), and the dev cluster's Prometheus
ADMIN_VALUES = yaml.safe_load(f"""
hub:
  extraEnv:
    JUPYTERHUB_GPU_PROMETHEUS_URL: {PROMETHEUS_URL}
  extraConfig:
    10-culler: |
      import os
      from jupyterhub_gpu.cull.service import add_culler_service

      add_culler_service(
          c, prometheus_url=os.environ.get("JUPYTERHUB_GPU_PROMETHEUS_URL"),
          timeout_seconds=8 * 3600, cull_every_seconds={CULL_EVERY}, dry_run=False)
""")
#: the API server's own ClusterRoleBindings (system:basic-user, system:discovery, ...),
#: which every authenticated identity has on AKS too
BOOTSTRAP_LABEL = ("kubernetes.io/bootstrapping", "rbac-defaults")
#: the groups the API server puts the hub's ServiceAccount token in
HUB_GROUPS = {"system:serviceaccounts", f"system:serviceaccounts:{HUB.namespace}",
              "system:authenticated"}
TEAM = "jhub-data-science"


@pytest.fixture(scope="module")
async def chart(cluster, cluster_spec_path, tmp_path_factory):
    async with chart_hub.serving(cluster, cluster_spec_path,
                                 tmp_path_factory.mktemp("chart-hub"), ADMIN_VALUES,
                                 hub_image.python_bin(hub_image.IMAGE_PINS)) as served:
        yield served


def _binds_the_hub(binding: dict) -> bool:
    for subject in binding.get("subjects") or []:
        kind, name = subject["kind"], subject["name"]
        if (kind == "ServiceAccount" and (subject.get("namespace"), name) == (
                HUB.namespace, HUB.service_account)) or (
                kind == "Group" and name in HUB_GROUPS) or (
                kind == "User" and name == IDENTITY):
            return True
    return False


def _key(obj: dict) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


async def _bindings_in_cluster(kube) -> dict[tuple, dict]:
    from kubernetes_asyncio import client

    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    found = {}
    for kind, listing in (("RoleBinding", await rbac.list_role_binding_for_all_namespaces()),
                          ("ClusterRoleBinding", await rbac.list_cluster_role_binding())):
        for item in kube.api_client.sanitize_for_serialization(listing)["items"]:
            labels = item["metadata"].get("labels") or {}
            if _binds_the_hub(item) and labels.get(BOOTSTRAP_LABEL[0]) != BOOTSTRAP_LABEL[1]:
                found[(kind, item["metadata"].get("namespace", ""),
                       item["metadata"]["name"])] = item
    return found


async def _rules(kube, kind: str, namespace: str, name: str) -> list[dict]:
    from kubernetes_asyncio import client

    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    role = (await rbac.read_namespaced_role(name, namespace) if kind == "Role"
            else await rbac.read_cluster_role(name))
    return kube.api_client.sanitize_for_serialization(role)["rules"]


def _as_applied(obj: dict) -> dict:
    """``obj`` with the namespace :func:`.chart_hub.apply` gives a namespaced object the
    chart renders without one (the release's)."""
    if obj["kind"] in ("Role", "RoleBinding") and not obj["metadata"].get("namespace"):
        return {**obj, "metadata": {**obj["metadata"],
                                    "namespace": z2jh_chart.RELEASE_NAMESPACE}}
    return obj


async def test_the_hub_is_bound_by_exactly_the_rbac_an_admin_applies(
        chart, kube, cluster_platform):
    """Every binding of the hub's ServiceAccount (or of a group its token is in) is the
    chart's or the bundle's, and each grants the rules of the applied object."""
    hub, _ = chart
    await check_bindings(kube, hub.objects, cluster_platform)


async def check_bindings(kube, chart_objects: list[dict], platform) -> None:
    """The bindings that reach the hub are those of ``chart_objects`` and of the
    bundle for ``platform``, with the applied rules."""
    applied = [_as_applied(o) for o in [*chart_objects, *hub_rbac.shipped_rbac(platform, HUB)]
               if o["kind"] in hub_rbac.RBAC_KINDS]
    expected = {_key(o): o for o in applied
                if o["kind"].endswith("Binding") and _binds_the_hub(o)}
    roles = {_key(o): o for o in applied if not o["kind"].endswith("Binding")}
    found = await _bindings_in_cluster(kube)
    assert sorted(found) == sorted(expected)
    for key, binding in expected.items():
        ref = binding["roleRef"]
        assert found[key]["roleRef"] == ref
        role = (ref["kind"], key[1] if ref["kind"] == "Role" else "", ref["name"])
        assert await _rules(kube, *role) == roles[role]["rules"], role


async def test_the_services_run_in_the_hubs_pod_with_the_hubs_environment(chart):
    hub, _ = chart
    index, _ = hub.starts["hub"]
    pod_pid = hub.processes[index].pid
    in_pod = await wait_for(lambda: _services(pod_pid), timeout=60,
                            what="the culler and gpu-resume under the hub")
    (culler,) = in_pod["culler"]  # one culler: the chart's own `cull` is off
    host_pid_ns = os.readlink("/proc/self/ns/pid")
    for pid in [culler, *in_pod["resume"]]:
        assert os.readlink(f"/proc/{pid}/ns/pid") != host_pid_ns, "in the pod's PID namespace"
    env = _environ(culler)
    assert env["JUPYTERHUB_SERVICE_NAME"] == CULLER
    assert env["JUPYTERHUB_GPU_PLATFORM_FILE"] == "/etc/jupyterhub-gpu/platform.yaml"
    assert env["JUPYTERHUB_GPU_PROMETHEUS_URL"] == PROMETHEUS_URL  # hub.extraEnv
    command = Path(f"/proc/{culler}/cmdline").read_bytes().split(b"\0")
    assert f"--cull-every={CULL_EVERY}".encode() in command  # the admin's later entry
    # the spec at the chart's mount path, as the culler's mount namespace has it
    root = Path(f"/proc/{culler}/root")
    assert (root / "etc/jupyterhub-gpu/platform.yaml").read_text() == Path(
        z2jh_chart.REPO / "tests/integration/platform.yaml").read_text()
    # gpu-resume listed every team namespace's pods as the hub's ServiceAccount (the
    # in-cluster config: the pod's environment has no kubeconfig), then idled
    await wait_for(lambda: "resumed 0 queued server(s)" in hub.hub_log.read_text(),
                   timeout=60, what="gpu-resume's first pass")
    assert "resume attempt 1 failed" not in hub.hub_log.read_text(), hub.tail()


def _services(pod_pid: int) -> dict[str, list[int]] | None:
    found: dict[str, list[int]] = {"culler": [], "resume": []}
    for pid in procs.descendants(pod_pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"jupyterhub_idle_culler" in cmdline:
            found["culler"].append(pid)
        elif resume.MODULE.encode() in cmdline:
            found["resume"].append(pid)
    return found if all(found.values()) else None


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


async def test_a_server_starts_and_stops_in_a_team_namespace_as_the_charts_account(
        chart, kube):
    hub, http = chart
    user, audit = "ines-chart", AuditLog(STATE_DIR)
    start = await audit.fence(kube)
    await chart_hubapi.add_user(http, hub, user, ["data-science"])
    assert await chart_hubapi.start_server(http, hub, user, "cpu") in (201, 202)
    await wait_for(lambda: chart_hubapi.ready(http, hub, user), timeout=180,
                   what=f"{user}'s server")
    await chart_hubapi.stop_server(http, hub, user)
    end = await audit.fence(kube)
    pod = f"jupyter-{user}"
    by_hub = {(r.verb, r.resource, r.namespace, r.name, r.code)
              for r in audit.between(start, end) if r.user == IDENTITY}
    assert {("create", "pods", TEAM, pod, 201), ("delete", "pods", TEAM, pod, 200),
            ("create", "persistentvolumeclaims", TEAM, f"claim-{user}", 201)} <= by_hub
    await _delete_home(kube, TEAM, user)


async def test_the_charts_account_is_refused_what_the_hub_must_not_do(chart, cluster):
    """The token the hub's pod mounts, against the real API server."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client import ApiException

    hub, _ = chart
    config = client.Configuration(host=cluster["server"])
    config.ssl_ca_cert = str(hub.sa_dir / "ca.crt")
    config.api_key = {"BearerToken": (hub.sa_dir / "token").read_text()}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    async with client.ApiClient(config) as api:
        review = await client.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        assert review.status.user_info.username == IDENTITY
        core = client.CoreV1Api(api)
        refused = {
            # a pod outside the release and team namespaces
            "create pods in kube-system": core.create_namespaced_pod(
                "kube-system", {"metadata": {"name": "not-the-hubs"},
                                "spec": {"containers": [{"name": "c", "image": "x"}]}}),
            # the teams' Secrets (the chart's Role reads Secrets in its own namespace only)
            "list secrets in a team namespace": core.list_namespaced_secret(TEAM),
            "list pods in every namespace": core.list_pod_for_all_namespaces(),
        }
        for what, call in refused.items():
            with pytest.raises(ApiException) as refusal:
                await call
            assert refusal.value.status == 403, what


async def test_the_culler_culls_a_server_idle_past_its_profiles_idle_timeout(chart, kube):
    hub, http = chart
    user = "cora-chart"  # experimentation: t4-quick, idleTimeout 10s
    await chart_hubapi.add_user(http, hub, user, ["experimentation"])
    assert await chart_hubapi.start_server(http, hub, user, "t4-quick") in (201, 202)
    # the server is up once the hub says so: the culler may stop it a moment later
    await wait_for(lambda: f"User {user} took" in hub.hub_log.read_text(), timeout=180,
                   what=f"{user}'s server to start")
    await wait_for(lambda: _no_server(http, hub, user), timeout=60,
                   what=f"the culler to stop {user}'s server")
    log = hub.hub_log.read_text()
    assert log.count(f"Culling user={user} server='' profile=t4-quick reason=idle") == 1, log
    await wait_for(lambda: _pod_gone(kube, "jhub-experimentation", f"jupyter-{user}"),
                   timeout=60, what=f"{user}'s pod to go")
    await _delete_home(kube, "jhub-experimentation", user)


async def _no_server(http, hub, user) -> bool:
    return await chart_hubapi.server(http, hub, user) is None


async def _pod_gone(kube, namespace: str, name: str) -> bool:
    pods = await kube.core.list_namespaced_pod(namespace)
    return name not in [p.metadata.name for p in pods.items]


async def test_gpu_resume_resumes_a_queued_server_after_the_hub_container_restarts(
        chart, kube):
    hub, http = chart
    holder, waiter = "hana-chart", "omar-chart"  # data-science: one MIG slice of quota
    for user in (holder, waiter):
        await chart_hubapi.add_user(http, hub, user, ["data-science"])
    try:
        assert await chart_hubapi.start_server(http, hub, holder, "a100-mig-3g") in (201, 202)
        await wait_for(lambda: chart_hubapi.ready(http, hub, holder), timeout=180,
                       what=f"{holder}'s server")
        assert await chart_hubapi.start_server(http, hub, waiter, "a100-mig-3g") in (201, 202)
        queued = await wait_for(lambda: _queued(kube, f"jupyter-{waiter}"), timeout=60,
                                what=f"{waiter} queued")
        await hub.restart("hub")
        await wait_for(lambda: demo.hub_answers(http, hub.url), timeout=120,
                       what=f"the restarted hub (log: {hub.hub_log})")
        server = await wait_for(lambda: chart_hubapi.server(http, hub, waiter), timeout=90,
                                what=f"gpu-resume to restart {waiter}'s spawn")
        assert server["pending"] == "spawn"
        assert f"resuming {waiter}'s queued server '' (profile a100-mig-3g)" in \
            hub.hub_log.read_text()
        assert await _queued(kube, f"jupyter-{waiter}") == queued, "same pod, same Workload"
        await chart_hubapi.stop_server(http, hub, holder)
        await wait_for(lambda: chart_hubapi.ready(http, hub, waiter), timeout=180,
                       what=f"{waiter}'s server once {holder}'s slice is free")
    finally:
        await chart_hubapi.stop_all_servers(http, hub)
        for user in (holder, waiter):
            await _delete_home(kube, TEAM, user)


async def _delete_home(kube, namespace: str, user: str) -> None:
    """The user's home claim (the values' ``claim-{username}``), which the hub
    keeps after a stop, if it was made."""
    from kubernetes_asyncio.client import ApiException

    try:
        await kube.core.delete_namespaced_persistent_volume_claim(f"claim-{user}", namespace)
    except ApiException as e:
        if e.status != 404:
            raise
