"""The pure Job builder: a training job queued like a notebook of the user's team,
with the notebook's home and checkpoint volumes, a failure policy under which a
disruption is no failure, and PyTorch DDP's rendezvous for a job of several pods."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.builders.job import (POD_FAILURE_POLICY, Home, JobGrant, JobRequest,
                                         build_job, home_of)
from jupyterhub_gpu.builders.kueue import kueue_objects
from jupyterhub_gpu.builders.pod import CHECKPOINT_VOLUME, authorize, spawn_settings, UserRef
from tests import z2jh_chart

ML_ENG = frozenset({"ml-eng"})


def _request(platform, slug: str, groups=ML_ENG, **changes) -> JobRequest:
    team = platform.team_for(groups)
    fields = {"name": "train-1", "user_slug": "alice",
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


async def test_the_volumes_are_the_notebook_pods(make_spawner, platform):
    """The Job mounts the same home claim and the same directory of the checkpoint PVC
    as the user's notebook pod, as the z2jh chart and KubeSpawner make it."""
    from kubernetes_asyncio.client import ApiClient

    config = z2jh_chart.kubespawner_config(z2jh_chart.helm_values())
    spawner = make_spawner(user="Max.Mustermann", groups=["ml-eng"], config=config)
    await spawner._run_apply_user_options({"profile": "a100-training"})
    async with ApiClient() as client:
        pod = client.sanitize_for_serialization(await spawner.get_pod_manifest())
    await spawner.api.api_client.close()
    request = _request(platform, "a100-train", home=home_of(pod),
                       user_slug=spawner._expand_user_properties("{username}"))
    job, _ = build_job(request)

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
    settings = spawn_settings(platform, grant)
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
