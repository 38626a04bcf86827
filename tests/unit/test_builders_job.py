"""The pure Job builder: a training job queued like a notebook of the user's team,
with the notebook's home and checkpoint volumes, a failure policy under which a
disruption is no failure, and PyTorch DDP's rendezvous for a job of several pods."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.builders.job import (POD_FAILURE_POLICY, Home, Identity, JobGrant,
                                         JobRequest, build_job, home_of, identity_of)
from jupyterhub_gpu.builders.kueue import kueue_objects
from jupyterhub_gpu.builders.pod import CHECKPOINT_VOLUME, spawn_settings
from jupyterhub_gpu.spec.grant import authorize, UserRef
from jupyterhub_gpu.jobs.request import check_submission, job_request
from tests import z2jh_chart

ML_ENG = frozenset({"ml-eng"})


def _request(platform, slug: str, groups=ML_ENG, **changes) -> JobRequest:
    team = platform.team_for(groups)
    fields = {"name": "train-1", "user_slug": "alice", "username": "alice",
              "grant": JobGrant.of(platform, platform.job_profile(slug), team),
              "image": "registry.example/notebook:1", "command": ("python", "train.py"),
              "home": Home("claim-alice", "/home/jovyan"),
              "checkpoint_storage": platform.checkpoint_storage}
    return JobRequest(**{**fields, **changes})


def _pod(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def _env(job: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom"))
            for e in _pod(job)["containers"][0]["env"]}


def test_queued_on_the_teams_local_queue_with_a_declared_priority(platform):
    job, service = build_job(_request(platform, "a100-train"))
    labels, namespace = job["metadata"]["labels"], job["metadata"]["namespace"]
    queues = {(o["metadata"]["namespace"], o["metadata"]["name"])
              for o in kueue_objects(platform) if o["kind"] == "LocalQueue"}
    classes = {o["metadata"]["name"] for o in kueue_objects(platform)
               if o["kind"] == "WorkloadPriorityClass"}
    assert (namespace, labels["kueue.x-k8s.io/queue-name"]) in queues
    assert namespace == "jhub-ml-eng"
    assert labels["kueue.x-k8s.io/priority-class"] == "batch"
    assert labels["kueue.x-k8s.io/priority-class"] in classes
    assert (job["apiVersion"], job["kind"], service) == ("batch/v1", "Job", None)
    # the queue label is the Job's: its pods are the Job's, not workloads of their own
    assert "kueue.x-k8s.io/queue-name" not in job["spec"]["template"]["metadata"]["labels"]


def test_a_disruption_is_no_failure_and_a_crash_is_one(platform):
    job, _ = build_job(_request(platform, "a100-train"))
    spec = job["spec"]
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    assert rules[-1] == {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0]}}
    assert rules == [dict(r) for r in rules]  # JSON all through (no tuples left)
    assert len(rules) == len(POD_FAILURE_POLICY["rules"])
    assert _pod(job)["restartPolicy"] == "Never"
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (2, 24 * 3600)
    assert (spec["parallelism"], spec["completions"]) == (1, 1)
    assert "completionMode" not in spec and "subdomain" not in _pod(job)
    assert _pod(job)["terminationGracePeriodSeconds"] == 25  # the checkpoint's grace
    assert _pod(job)["automountServiceAccountToken"] is False


async def _chart_notebook_pod(make_spawner, user: str, values=None) -> dict:
    """The pod GPUSpawner makes for ``user``'s a100-training server, configured as the
    z2jh chart configures KubeSpawner from our Helm values (and ``values``)."""
    from kubernetes_asyncio.client import ApiClient

    config = z2jh_chart.kubespawner_config(z2jh_chart.helm_values(*([values] if values else [])))
    spawner = make_spawner(user=user, groups=["ml-eng"], config=config)
    await spawner._run_apply_user_options({"profile": "a100-training"})
    async with ApiClient() as client:
        pod = client.sanitize_for_serialization(await spawner.get_pod_manifest())
    await spawner.api.api_client.close()
    return pod


def _job_for(platform, pod: dict, user: str, home_path: str = "/home/jovyan") -> dict:
    """The Job the gpu-jobs service builds for ``user`` whose notebook pod is ``pod``."""
    submission = check_submission(platform, UserRef(user, ML_ENG),
                                  {"profile": "a100-train", "script": "train.py"}, 0)
    job, _ = build_job(job_request(submission, pod, "job-1", platform.checkpoint_storage,
                                   user, home_path))
    return job


@pytest.mark.parametrize("user", ["max", "Max.Mustermann", "a" * 60,
                                  "max-mustermann---1ca42713"])
async def test_the_volumes_are_the_notebook_pods(make_spawner, platform, user):
    """The Job mounts the same home claim and the same directory of the checkpoint PVC
    as the user's notebook pod, as the z2jh chart and KubeSpawner make it: for a
    plain name, one KubeSpawner's slug changes, a long one, and one that looks like
    another's slug. (The job's directory was the pod's username label, which is not
    KubeSpawner's ``{username}`` for the last three.)"""
    pod = await _chart_notebook_pod(make_spawner, user)
    job = _job_for(platform, pod, user)

    def claims_and_mounts(spec: dict) -> set:
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]
                  if "persistentVolumeClaim" in v}
        return {(claims[m["name"]], m["mountPath"], m.get("subPath") or "")
                for m in spec["containers"][0]["volumeMounts"] if m["name"] in claims}

    assert claims_and_mounts(_pod(job)) == claims_and_mounts(pod["spec"])
    assert len(claims_and_mounts(_pod(job))) == 2  # home and checkpoints
    notebook_env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert _env(job)["CHECKPOINT_DIR"] == notebook_env["CHECKPOINT_DIR"]


def test_no_checkpoint_volume_without_checkpoints(platform):
    job, _ = build_job(_request(platform, "cpu-job", groups=frozenset({"data-science"})))
    assert [v["name"] for v in _pod(job)["volumes"]] == ["home"]
    assert "CHECKPOINT_DIR" not in _env(job)
    assert CHECKPOINT_VOLUME not in str(_pod(job)["containers"][0]["volumeMounts"])
    requests = _pod(job)["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": "2", "memory": "8Gi"}  # a CPU pool: no GPU resource


@pytest.mark.parametrize("notebook, job", [("a100-spot", "a100-ddp-2"),
                                           ("a100-training", "a100-train")])
def test_placement_is_the_notebook_profiles(platform, notebook, job):
    """A single-pool job selects and tolerates its pool as a notebook there does; a
    fallback one leaves both to Kueue (the admitted flavor's) and keeps to its pools
    by node affinity, but has no scheduling gate: nothing would lift it."""
    grant = authorize(platform, UserRef("alice", ML_ENG), {"profile": notebook})
    settings = spawn_settings(platform, grant, "alice")
    built, _ = build_job(_request(platform, job))
    pod = _pod(built)
    assert pod["nodeSelector"] == settings.node_selector
    assert pod["tolerations"] == settings.tolerations
    terms = pod.get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    assert terms == settings.node_affinity_required
    assert "schedulingGates" not in pod
    resources = pod["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == settings.extra_resource_limits[
        "nvidia.com/gpu"] == "1"


def test_several_pods_make_an_indexed_job_with_the_ddp_rendezvous(platform):
    job, service = build_job(_request(platform, "a100-ddp-2", name="ddp"))
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == (
        "Indexed", 2, 2)
    assert _pod(job)["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["namespace"] == job["metadata"]["namespace"]
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": "ddp"}
    env = _env(job)
    # rank 0's pod: hostname <job>-<index> in the Service's subdomain
    assert env["MASTER_ADDR"] == f"ddp-0.{service['metadata']['name']}"
    assert env["MASTER_PORT"] == str(service["spec"]["ports"][0]["port"])
    assert env["WORLD_SIZE"] == "2"
    index = {"fieldRef": {"fieldPath":
                          "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["RANK"] == env["NODE_RANK"] == index


# A team's read-only datasets claim, mounted by the chart (singleuser.storage.extra*)
# beside the home; its volume name sorts before the chart's "volume-{user_server}", so
# KubeSpawner puts it first in the pod.
DATASETS = {"singleuser": {"storage": {
    "extraVolumes": [{"name": "datasets", "persistentVolumeClaim": {
        "claimName": "team-datasets", "readOnly": True}}],
    "extraVolumeMounts": [{"name": "datasets", "mountPath": "/datasets", "readOnly": True}]}}}


async def test_the_home_is_the_claim_at_the_home_path_not_the_first_one(make_spawner,
                                                                        platform):
    """Issue #25: a job took the notebook's first claim as its home, read-write: here
    the team's read-only datasets. The home is the claim mounted at the chart's
    homeMountPath, and no other claim of the notebook is copied."""
    pod = await _chart_notebook_pod(make_spawner, "alice", DATASETS)
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "team-datasets"
    spec = _pod(_job_for(platform, pod, "alice"))
    claims = {v["name"]: v["persistentVolumeClaim"] for v in spec["volumes"]}
    (container,) = spec["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    home = mounts["/home/jovyan"]
    assert claims[home["name"]] == {"claimName": "claim-alice"}
    assert container["workingDir"] == "/home/jovyan"
    assert "team-datasets" not in str(spec["volumes"])
    assert "readOnly" not in home


async def test_a_read_only_home_stays_read_only(make_spawner, platform):
    """readOnly is kept on the copied mount and on its claim."""
    values = {"singleuser": {"storage": {
        "type": "static", "static": {"pvcName": "shared-homes", "subPath": "{username}"},
        "homeMountPath": "/home/work",
        "extraVolumes": [{"name": "datasets", "persistentVolumeClaim": {
            "claimName": "team-datasets"}}],
        "extraVolumeMounts": [{"name": "datasets", "mountPath": "/datasets"}]}}}
    pod = await _chart_notebook_pod(make_spawner, "alice", values)
    for volume in pod["spec"]["volumes"]:
        if volume["name"] == "home":
            volume["persistentVolumeClaim"]["readOnly"] = True
    for mount in pod["spec"]["containers"][0]["volumeMounts"]:
        if mount["name"] == "home":
            mount["readOnly"] = True
    home = home_of(pod, "/home/work/")
    assert home == Home("shared-homes", "/home/work", "alice", read_only=True,
                        claim_read_only=True)
    spec = _pod(build_job(_request(platform, "a100-train", home=home))[0])
    assert spec["volumes"][0] == {"name": "home", "persistentVolumeClaim": {
        "claimName": "shared-homes", "readOnly": True}}
    assert spec["containers"][0]["volumeMounts"][0] == {
        "name": "home", "mountPath": "/home/work", "subPath": "alice", "readOnly": True}
    assert home_of(pod) is None  # nothing at the default /home/jovyan: no home


async def test_the_job_pod_runs_as_the_notebook_under_restricted(make_spawner, platform):
    """Issue #25: a job pod had no securityContext (the image's user, root in many
    images; privilege escalation allowed). It runs as the notebook's uid and fsGroup
    (z2jh's singleuser.uid 1000 and fsGid 100) and meets Pod Security "restricted"."""
    pod = await _chart_notebook_pod(make_spawner, "alice")
    spec = _pod(_job_for(platform, pod, "alice"))
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000,
                                       "fsGroup": 100,
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_the_identity_is_the_containers_over_the_pods(platform):
    pod = {"spec": {"securityContext": {"runAsUser": 5, "runAsGroup": 6, "fsGroup": 7,
                                        "supplementalGroups": [8, 9]},
                    "containers": [{"name": "notebook", "securityContext": {"runAsUser": 1001}},
                                   {"name": "sidecar", "securityContext": {"runAsUser": 0}}]}}
    identity = identity_of(pod)
    assert identity == Identity(1001, 6, 7, (8, 9))
    context = _pod(build_job(_request(platform, "a100-train", identity=identity))[0])[
        "securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"],
            context["supplementalGroups"], context["runAsNonRoot"]) == (1001, 6, 7, [8, 9], True)
