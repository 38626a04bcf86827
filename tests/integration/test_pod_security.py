"""Pod Security admission in the team namespaces, by the dev cluster's real
kube-apiserver (its PodSecurity admission plugin is on by default), as the hub's
ServiceAccount with the RBAC we ship (issue #25).

The team namespaces enforce ``restricted`` (config/team-namespaces.yaml). A notebook
pod as GPUSpawner makes it under the z2jh chart's config from our values, and a job
pod as the job builder makes it from that notebook, are admitted; the same notebook
pod with the chart's default metadata-blocking init container, or without the
security settings GPUSpawner adds, is refused; and the hub's identity, which may
create pods there, cannot start a privileged pod. Every create is a server-side dry
run: admission runs in full, nothing is stored."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio.client import ApiException

from jupyterhub_gpu.builders.job import build_job
from jupyterhub_gpu.bundle.namespaces import POD_SECURITY_LEVEL, pod_security_labels
from jupyterhub_gpu.jobs.request import check_submission, job_request
from jupyterhub_gpu.spec.grant import UserRef
from tests import z2jh_chart

pytestmark = pytest.mark.skipif(
    not z2jh_chart.REFERENCE.is_dir(),
    reason=f"z2jh reference data not found at {z2jh_chart.REFERENCE}: the chart's "
           f"default values are needed beside the checkout")

USER, GROUP, PROFILE, JOB_PROFILE = "pat", "data-science", "cpu", "cpu-job"
VIOLATES = "violates PodSecurity"


async def _spawner(cluster_spec_path, values=None):
    """GPUSpawner for USER's PROFILE under the chart's config of our values (and
    ``values``), its profile applied: its Kubernetes client (KubeSpawner's shared one,
    closed with the test session's loop) is the hub's identity."""
    from traitlets.config import Config

    from jupyterhub_gpu.hub.render import OfflineHub, OfflineUser, _Group
    from jupyterhub_gpu.hub.spawner import GPUSpawner

    cfg = Config()
    cfg.merge(z2jh_chart.kubespawner_config(z2jh_chart.helm_values(*([values] if values else []))))
    cfg.GPUSpawner.platform_file = str(cluster_spec_path)
    spawner = GPUSpawner(user=OfflineUser(USER, [_Group(GROUP)]), hub=OfflineHub(), config=cfg)
    await spawner._run_apply_user_options({"profile": PROFILE})
    return spawner


async def _dry_run(spawner, pod) -> str | None:
    """None if the API server admits ``pod`` (as the hub), else its refusal."""
    try:
        await spawner.api.create_namespaced_pod(spawner.namespace, pod, dry_run="All")
    except ApiException as e:
        assert e.status == 403, e.body
        return json.loads(e.body)["message"]
    return None


def _plain(spawner, pod) -> dict:
    return spawner.api.api_client.sanitize_for_serialization(pod)


async def test_team_namespaces_enforce_restricted(cluster, kube, cluster_platform):
    for team in cluster_platform.teams:
        namespace = await kube.core.read_namespace(team.namespace)
        assert pod_security_labels().items() <= namespace.metadata.labels.items()
        assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"


async def test_the_charts_notebook_pod_and_its_job_pod_are_admitted(cluster, cluster_spec_path,
                                                                    cluster_platform):
    spawner = await _spawner(cluster_spec_path)
    notebook = await spawner.get_pod_manifest()
    assert await _dry_run(spawner, notebook) is None
    # the job the gpu-jobs service builds from that notebook pod: its pod template
    submission = check_submission(cluster_platform, UserRef(USER, frozenset({GROUP})),
                                  {"profile": JOB_PROFILE, "script": "train.py"}, 0)
    job, _ = build_job(job_request(submission, _plain(spawner, notebook), "job-pat-1",
                                   cluster_platform.checkpoint_storage, USER))
    template = job["spec"]["template"]
    assert template["spec"]["securityContext"]["runAsUser"] == 1000  # the notebook's
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "job-pat-1-0", "labels": template["metadata"]["labels"]},
           "spec": template["spec"]}
    assert await _dry_run(spawner, pod) is None


async def test_the_charts_default_metadata_block_is_refused(cluster, cluster_spec_path):
    """Why our values turn singleuser.cloudMetadata.blockWithIptables off."""
    spawner = await _spawner(cluster_spec_path,
                             {"singleuser": {"cloudMetadata": {"blockWithIptables": True}}})
    refusal = await _dry_run(spawner, await spawner.get_pod_manifest())
    assert refusal is not None and VIOLATES in refusal
    assert f'"{POD_SECURITY_LEVEL}:' in refusal and "privileged" in refusal


async def test_a_notebook_pod_without_gpuspawners_settings_is_refused(cluster,
                                                                      cluster_spec_path):
    """The chart's own settings (uid 1000, fsGid 100, allowPrivilegeEscalation false)
    are not enough for "restricted": runAsNonRoot, seccomp and the dropped
    capabilities are GPUSpawner's."""
    spawner = await _spawner(cluster_spec_path)
    spawner.pod_security_context, spawner.container_security_context = {}, {}
    refusal = await _dry_run(spawner, await spawner.get_pod_manifest())
    assert refusal is not None and VIOLATES in refusal
    for missing in ("runAsNonRoot", "seccompProfile", "capabilities"):
        assert missing in refusal, missing


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
async def test_the_hubs_identity_cannot_start_a_privileged_pod(cluster, cluster_spec_path,
                                                               why, spec):
    """The hub's ServiceAccount (shared by the hub's managed services) may create pods
    in team namespaces; Pod Security refuses it any pod that could take the node."""
    spawner = await _spawner(cluster_spec_path)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "escape"}, "spec": spec}
    refusal = await _dry_run(spawner, pod)
    assert refusal is not None and VIOLATES in refusal, why
