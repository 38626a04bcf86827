"""Pod Security admission in the team namespaces, by the dev cluster's real
kube-apiserver (its PodSecurity admission plugin is on by default), for the notebook
pods the hub deployed from the real z2jh 4.4.0 chart creates (:mod:`.chart_hub`), and
as the hub's ServiceAccount with the RBAC we ship (issue #25).

The team namespaces enforce ``restricted`` (config/team-namespaces.yaml).

* A server started through the chart hub's REST API runs: the pod GPUSpawner made
  under the chart's own ``jupyterhub_config.py`` from our values was admitted. That
  pod, read back from the API server, is the one the rest is derived from: the job
  pod the gpu-jobs service builds from it is admitted, and the same pod without the
  security settings GPUSpawner adds (only what KubeSpawner makes of the chart's
  ``uid``, ``fsGid`` and ``allowPrivilegeEscalation``) is refused. These two are
  server-side dry runs as the hub's identity: admission runs in full, nothing is
  stored.
* The chart's default ``singleuser.cloudMetadata.blockWithIptables: true`` (our
  values turn it off) makes the chart's hub add a privileged iptables init container
  (z2jh 4.4.0, ``jupyterhub/files/hub/jupyterhub_config.py``, the
  ``cloudMetadata`` part): a second chart hub, with that value in the admin's own
  values file, really creates such a pod; the API server refuses it, the spawn fails
  and the user's spawn progress says why. What the user reads there is "Spawn failed:"
  and KubeSpawner's ``ApiException`` as text (status, response headers, and the API
  server's JSON body, which names the init container and each rule it breaks).
* The hub's identity, which may create pods there, cannot start a privileged pod.

Each chart hub runs inside its module-scoped fixture, which returns what the test
needs once that hub has stopped: the two never run at once (they share this run's
ports), whatever order the tests run in. Both run in our hub image's Python environment
(:mod:`.hub_image`: JupyterHub 5.5.0, KubeSpawner 7.0.0), as on AKS."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes_asyncio.client import ApiException

from jupyterhub_gpu.builders.job import build_job
from jupyterhub_gpu.builders.pod import RESTRICTED_CONTAINER, RESTRICTED_POD
from jupyterhub_gpu.bundle.namespaces import POD_SECURITY_LEVEL, pod_security_labels
from jupyterhub_gpu.jobs.request import check_submission, job_request
from jupyterhub_gpu.spec.grant import UserRef
from tests import z2jh_chart

from . import chart_hub, chart_hubapi, hub_image
from .conftest import wait_for

pytestmark = pytest.mark.skipif(
    not z2jh_chart.CHART.is_dir(),
    reason=f"z2jh chart not found at {z2jh_chart.CHART}: the chart is needed beside "
           f"the checkout")

USER, BLOCKED_USER, GROUP = "pat-psa", "kim-psa", "data-science"
PROFILE, JOB_PROFILE = "cpu", "cpu-job"
VIOLATES = "violates PodSecurity"
METADATA_BLOCK = {"singleuser": {"cloudMetadata": {"blockWithIptables": True}}}


@pytest.fixture(scope="module")
async def hub_identity(hub_kubeconfig):
    """CoreV1Api as the hub's ServiceAccount (the RBAC we ship and the chart's Role)."""
    from kubernetes_asyncio import client, config

    api_client = await config.new_client_from_config(config_file=str(hub_kubeconfig))
    yield client.CoreV1Api(api_client)
    await api_client.close()


@pytest.fixture(scope="module")
async def admitted(cluster, kube, cluster_spec_path, cluster_platform, tmp_path_factory):
    """(the notebook pod the chart hub created for USER's PROFILE and that runs, read
    back from the API server; the chart's rendered values), the hub stopped."""
    namespace = cluster_platform.team_for({GROUP}).namespace
    try:
        async with chart_hub.serving(cluster, cluster_spec_path,
                                     tmp_path_factory.mktemp("chart-hub"),
                                     python_bin=hub_image.python_bin(hub_image.IMAGE_PINS)) as (hub, http):
            await chart_hubapi.add_user(http, hub, USER, [GROUP])
            assert await chart_hubapi.start_server(http, hub, USER, PROFILE) in (201, 202)
            await wait_for(lambda: chart_hubapi.ready(http, hub, USER), timeout=180,
                           what=f"{USER}'s server")
            (pod,) = await chart_hubapi.user_pods(kube, namespace, USER)
            await chart_hubapi.stop_server(http, hub, USER)
            return pod, hub.values
    finally:
        await chart_hubapi.delete_home(kube, namespace, USER)


@pytest.fixture(scope="module")
async def blocked(cluster, kube, cluster_spec_path, cluster_platform, tmp_path_factory):
    """What the chart hub with the chart's default metadata block shows when
    BLOCKED_USER starts PROFILE: (the start request's status, the spawn progress's
    last event, the user's pods in the team namespace, the hub's log), the hub
    stopped."""
    namespace = cluster_platform.team_for({GROUP}).namespace
    events: list[dict] = []
    try:
        async with chart_hub.serving(cluster, cluster_spec_path,
                                     tmp_path_factory.mktemp("chart-hub-metadata"),
                                     METADATA_BLOCK, hub_image.python_bin(hub_image.IMAGE_PINS)) as (hub, http):
            assert hub.values["singleuser"]["cloudMetadata"]["blockWithIptables"] is True
            await chart_hubapi.add_user(http, hub, BLOCKED_USER, [GROUP])
            status = await chart_hubapi.start_server(http, hub, BLOCKED_USER, PROFILE)
            await wait_for(lambda: chart_hubapi.spawn_ended(http, hub, BLOCKED_USER, events),
                           timeout=120, what=f"{BLOCKED_USER}'s spawn to end")
            pods = await chart_hubapi.user_pods(kube, namespace, BLOCKED_USER)
            return status, events[-1], pods, hub.tail(20000)
    finally:
        await chart_hubapi.delete_home(kube, namespace, BLOCKED_USER)


async def _dry_run(core, namespace: str, pod: dict) -> str | None:
    """None if the API server admits ``pod`` (as ``core``'s identity), else its refusal."""
    try:
        await core.create_namespaced_pod(namespace, pod, dry_run="All")
    except ApiException as e:
        assert e.status == 403, e.body
        return json.loads(e.body)["message"]
    return None


def _as_new(pod: dict, name: str, spec: dict | None = None) -> dict:
    """A pod to create from a pod read back: its labels and spec (``spec`` if given),
    not yet bound to a node."""
    spec = copy.deepcopy(spec if spec is not None else pod["spec"])
    spec.pop("nodeName", None)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": dict(pod["metadata"].get("labels") or {})},
            "spec": spec}


async def test_team_namespaces_enforce_restricted(cluster, kube, cluster_platform):
    for team in cluster_platform.teams:
        namespace = await kube.core.read_namespace(team.namespace)
        assert pod_security_labels().items() <= namespace.metadata.labels.items()
        assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"


async def test_the_chart_hubs_notebook_pod_is_admitted(admitted, cluster_platform):
    pod, _ = admitted
    assert pod["metadata"]["namespace"] == cluster_platform.team_for({GROUP}).namespace
    assert pod["status"]["phase"] == "Running"
    # it met "restricted" with GPUSpawner's settings over the chart's
    assert RESTRICTED_POD.items() <= pod["spec"]["securityContext"].items()
    (notebook,) = pod["spec"]["containers"]
    assert RESTRICTED_CONTAINER.items() <= notebook["securityContext"].items()
    assert not pod["spec"].get("initContainers")


async def test_the_job_pod_of_the_chart_hubs_notebook_is_admitted(admitted, hub_identity,
                                                                   cluster_platform):
    """The job the gpu-jobs service builds from that notebook pod: its pod template."""
    pod, values = admitted
    submission = check_submission(cluster_platform, UserRef(USER, frozenset({GROUP})),
                                  {"profile": JOB_PROFILE, "script": "train.py"}, 0)
    job, _ = build_job(job_request(
        submission, pod, "job-pat-psa-1", cluster_platform.checkpoint_storage, USER,
        z2jh_chart.get(values, "singleuser.storage.homeMountPath")))
    template = job["spec"]["template"]
    assert template["spec"]["securityContext"]["runAsUser"] == (
        pod["spec"]["containers"][0]["securityContext"]["runAsUser"])  # the notebook's
    job_pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "job-pat-psa-1-0", "labels": template["metadata"]["labels"]},
               "spec": template["spec"]}
    assert await _dry_run(hub_identity, pod["metadata"]["namespace"], job_pod) is None


async def test_the_notebook_pod_without_gpuspawners_settings_is_refused(admitted, hub_identity):
    """The chart's own settings (uid 1000, fsGid 100, allowPrivilegeEscalation false)
    are not enough for "restricted": runAsNonRoot, seccomp and the dropped
    capabilities are GPUSpawner's."""
    pod, values = admitted
    spec = copy.deepcopy(pod["spec"])
    for key in RESTRICTED_POD:
        spec["securityContext"].pop(key)
    (notebook,) = spec["containers"]
    notebook["securityContext"].pop("capabilities")
    # what KubeSpawner made of the chart's singleuser.allowPrivilegeEscalation stays
    assert notebook["securityContext"]["allowPrivilegeEscalation"] is z2jh_chart.get(
        values, "singleuser.allowPrivilegeEscalation")
    variant = _as_new(pod, f"{pod['metadata']['name']}-bare", spec)
    refusal = await _dry_run(hub_identity, pod["metadata"]["namespace"], variant)
    assert refusal is not None and VIOLATES in refusal
    for missing in ("runAsNonRoot", "seccompProfile", "capabilities"):
        assert missing in refusal, missing


async def test_the_charts_default_metadata_block_is_refused(blocked):
    """Why our values turn singleuser.cloudMetadata.blockWithIptables off: the chart
    hub's pod with the chart's privileged iptables init container is refused, and the
    user is told so."""
    status, last_event, pods, hub_log = blocked
    assert status in (202, 500), status  # still pending, or failed within the request
    assert pods == []  # refused at creation: nothing was stored
    assert last_event.get("failed") is True, last_event
    message = last_event["message"]
    assert message.startswith("Spawn failed:"), message
    assert VIOLATES in message and f'"{POD_SECURITY_LEVEL}:' in message, message
    assert z2jh_chart.METADATA_BLOCK_CONTAINER in message and "privileged" in message, message
    assert VIOLATES in hub_log


@pytest.mark.parametrize("why, spec", [
    ("privileged", {"containers": [{"name": "x", "image": "busybox",
                                    "securityContext": {"privileged": True}}]}),
    ("hostPath", {"volumes": [{"name": "root", "hostPath": {"path": "/"}}],
                  "containers": [{"name": "x", "image": "busybox",
                                  "volumeMounts": [{"name": "root", "mountPath": "/host"}]}]}),
    ("host namespaces", {"hostPID": True, "hostNetwork": True,
                         "containers": [{"name": "x", "image": "busybox"}]}),
    ("root", {"securityContext": {"runAsUser": 0},
              "containers": [{"name": "x", "image": "busybox"}]}),
])
async def test_the_hubs_identity_cannot_start_a_privileged_pod(hub_identity, cluster_platform,
                                                               why, spec):
    """The hub's ServiceAccount (shared by the hub's managed services) may create pods
    in team namespaces; Pod Security refuses it any pod that could take the node."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "escape"}, "spec": spec}
    refusal = await _dry_run(hub_identity, cluster_platform.teams[0].namespace, pod)
    assert refusal is not None and VIOLATES in refusal, why
