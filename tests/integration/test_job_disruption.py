"""[jobs] Training jobs meet the rest of the platform on the real control plane: Kueue's
all-or-nothing admission (``waitForPodsReady``, its timeout derived from
``tests/integration/platform.yaml``: 2m2s), a notebook preempted for another team's
training job and told which, and a job whose node goes away resuming from its
checkpoint without using up a retry (its pods run as real processes by the pod
runner, the stand-in kubelet).

Pools t4train (team "trainers") and t4preempt (teams "modelers" and "explorers",
cohort "preemption") are these tests' and test_jobs.py's alone."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import pytest

from jupyterhub_gpu.builders.job import Home, JobGrant, JobRequest, build_job
from jupyterhub_gpu.bundle.kueueconfig import pods_ready_timeout
from jupyterhub_gpu.spec.model import Checkpoint, CheckpointStorage

from .conftest import wait_for
from .test_jobs import Jobs, _condition, _condition_of, _request
from .test_jobs import hub_batch  # noqa: F401 - the fixture
from .test_scheduling import _pool_of

TRAINERS = "jhub-trainers"


async def _phases(jobs: Jobs, name: str) -> list[str]:
    return sorted(p.status.phase for p in await jobs.pods(name))


async def _evicted_for_readiness(jobs: Jobs, uid: str) -> dict | None:
    workload = await jobs.workload(uid)
    evicted = next((c for c in (workload or {}).get("status", {}).get("conditions", [])
                    if c["type"] == "Evicted" and c["status"] == "True"), None)
    return workload if evicted and evicted["reason"] == "PodsReadyTimeout" else None


@pytest.mark.slow
async def test_a_job_whose_pods_cannot_all_start_is_evicted_and_requeued(
        hub_batch, kube, cluster_platform):  # noqa: F811
    """Quota for both pods, but the pool may have one node, and has it already (a pod
    outside Kueue holds it, with room for one of the job's pods): one pod runs, the
    other finds no machine. Kueue evicts the job after the timeout and requeues it,
    instead of the running pod holding its GPU until maxRunTime. (Karpenter exceeds a
    NodePool's node limit when it launches several NodeClaims in one batch, so the
    limit is reached before the job's pods come.)"""
    pool = cluster_platform.pool("t4train")
    jobs = Jobs(kube, TRAINERS)

    async def no_node():
        return not await kube.pool_nodes(pool.name)

    await wait_for(no_node, timeout=180, what="pool t4train to have no node left")
    await kube.set_node_limit(pool.name, 1)
    pin = {"metadata": {"name": "pin-t4train", "namespace": "default"},
           "spec": {"nodeSelector": dict(pool.node_selector),
                    "tolerations": [t.toleration() for t in pool.taints],
                    "containers": [{"name": "pin", "image": "pause",
                                    "resources": {"requests": {"cpu": "10m"}}}]}}
    await kube.core.create_namespaced_pod("default", pin)
    try:
        async def pinned():
            pod = await kube.core.read_namespaced_pod("pin-t4train", "default")
            return pod.status.phase == "Running"

        await wait_for(pinned, timeout=90, what="the pool's one node")
        gang = await hub_batch(build_job(_request(cluster_platform, "t4-ddp-2", "gang")),
                               run_for="30m")
        uid = gang.metadata.uid
        admitted = await wait_for(lambda: jobs.admitted(uid), timeout=60, what="admission")
        assert admitted["status"]["admission"]["podSetAssignments"][0]["count"] == 2

        async def half_started():
            return await _phases(jobs, "gang") == ["Pending", "Running"]

        await wait_for(half_started, timeout=90, what="one pod running, one without a node")
        assert len(await kube.pool_nodes(pool.name)) == 1
        workload = await wait_for(lambda: _evicted_for_readiness(jobs, uid),
                                  timeout=pods_ready_timeout(cluster_platform) + 90,
                                  interval=1, what="Kueue to evict the half-started job")
        assert workload["status"]["requeueState"]["count"] == 1

        async def released():
            job, workload = await jobs.job("gang"), await jobs.workload(uid)
            return (job["spec"]["suspend"] and not await jobs.pods("gang")
                    and not _condition(workload, "QuotaReserved"))

        await wait_for(released, timeout=60, what="the job suspended, its pods and quota gone")
        workload = await jobs.workload(uid)
        assert workload["spec"].get("active", True), "requeued, not deactivated"
        assert not _condition(await jobs.job("gang"), "Failed")
    finally:
        await kube.core.delete_namespaced_pod("pin-t4train", "default", grace_period_seconds=0)
        await kube.restore_node_limit(pool)


async def test_a_notebook_preempted_for_another_teams_training_job_is_told_which(
        spawn, kube, hub_batch, cluster_platform, pod_history):  # noqa: F811
    from kubernetes_asyncio.client import V1ObjectMeta, V1PersistentVolumeClaim

    explorers = cluster_platform.team_for({"explorers"})
    pvc = V1PersistentVolumeClaim(
        metadata=V1ObjectMeta(name="claim-eli"),
        spec={"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}})
    await kube.core.create_namespaced_persistent_volume_claim(explorers.namespace, pvc)
    notebook = await spawn("eli", ["explorers"], "t4-spot-borrow")  # on the lent GPU
    assert await _pool_of(kube, notebook) == "t4preempt"

    modelers = cluster_platform.team_for({"modelers"})
    grant = JobGrant.of(cluster_platform, cluster_platform.job_profile("t4-spot-train"),
                        modelers)
    created = await hub_batch(build_job(JobRequest(
        name="finetune", user_slug="mo", username="mo", grant=grant, image="jupyter/minimal",
        command=("python", "train.py"))), run_for="30m")
    jobs = Jobs(kube, modelers.namespace)

    assert await wait_for(lambda: notebook.poll(), timeout=90, what="poll() to see the stop") == 1
    history = pod_history[f"{explorers.namespace}/{notebook.pod_name}"]
    targets = [c for pod in history for c in pod.get("status", {}).get("conditions", [])
               if c["type"] == "TerminationTarget"]
    assert targets and targets[0]["reason"] == "WorkloadEvictedDueToPreempted", targets
    notice = notebook.gpu_stop_notice
    assert notice["reason"] == "preempted"
    assert re.fullmatch(r"Your server was preempted for training job finetune of team "
                        r"modelers at \d\d:\d\d UTC on \d{4}-\d\d-\d\d\. Your files are kept\.",
                        notice["message"]), notice
    assert notice["message"].endswith(f"UTC on {notice['at'][:10]}. Your files are kept.")
    form = await notebook.get_options_form()
    assert notice["message"] in form.replace("&#39;", "'")

    workload = await wait_for(lambda: jobs.admitted(created.metadata.uid), timeout=60,
                              what="the training job's admission")
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert set(assignment["flavors"].values()) == {"t4preempt"}
    claims = await kube.core.list_namespaced_persistent_volume_claim(explorers.namespace)
    assert "claim-eli" in [c.metadata.name for c in claims.items]


# The job: resume from the last checkpoint, say what it found, save one and wait
# for the disruption if there was none.
SCRIPT = """\
import os, time
from jupyterhub_gpu import checkpoint
step = checkpoint.latest("train", default=0)
with open(os.path.join(os.environ["HOME"], "found-" + os.environ["HOSTNAME"]), "w") as f:
    f.write(str(step))
if step == 0:
    checkpoint.save(1, "train")
    open(os.path.join(os.environ["HOME"], "saved"), "w").write("1")
    time.sleep(3600)
"""


@pytest.fixture
async def trainer_volumes(kube):
    """A home and a checkpoint PVC in the trainers' namespace, each bound to a PV of
    its own (the dev cluster has no provisioner; kwok mounts nothing)."""
    names = ("claim-tia", "checkpoints-trainers")
    for name in names:
        await kube.core.create_persistent_volume({
            "metadata": {"name": f"{TRAINERS}-{name}"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                     "hostPath": {"path": f"/tmp/{name}"},
                     "claimRef": {"namespace": TRAINERS, "name": name}}})
        await kube.core.create_namespaced_persistent_volume_claim(TRAINERS, {
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                     "volumeName": f"{TRAINERS}-{name}",
                     "resources": {"requests": {"storage": "1Gi"}}}})

    async def bound():
        claims = await kube.core.list_namespaced_persistent_volume_claim(TRAINERS)
        return {c.metadata.name for c in claims.items if c.status.phase == "Bound"} >= set(names)

    await wait_for(bound, timeout=60, what="the claims to be bound")
    yield names
    for name in names:
        await kube.core.delete_namespaced_persistent_volume_claim(name, TRAINERS)
        await kube.core.delete_persistent_volume(f"{TRAINERS}-{name}")


async def test_a_job_whose_node_goes_away_resumes_from_its_checkpoint_without_a_retry(
        cluster, kube, hub_batch, cluster_platform, trainer_volumes, pod_history,  # noqa: F811
        tmp_path):
    from jupyterhub_gpu.devcluster.podrunner import PodRunner

    home_claim, checkpoint_claim = trainer_volumes
    team = cluster_platform.team_for({"trainers"})
    profile = dataclasses.replace(cluster_platform.job_profile("t4-train"),
                                  checkpoint=Checkpoint(grace_period_seconds=10))
    grant = JobGrant.of(cluster_platform, profile, team)
    manifests = build_job(JobRequest(
        name="resume", user_slug="tia", username="tia", grant=grant, image="jupyter/minimal",
        command=("python", "-c", SCRIPT), home=Home(home_claim, "/home/jovyan"),
        checkpoint_storage=CheckpointStorage(checkpoint_claim)))
    home = tmp_path / "volumes" / TRAINERS / home_claim
    jobs = Jobs(kube, TRAINERS)
    runner = asyncio.create_task(PodRunner(Path(cluster["kubeconfig"]), tmp_path).run())
    try:
        await hub_batch(manifests, run_for=None)  # the pod runner runs its pods
        await wait_for(lambda: (home / "saved").exists(), timeout=120,
                       what="the first pod to save a checkpoint")
        (first,) = await jobs.pods("resume")
        assert first.status.phase == "Running"
        assert (home / f"found-{first.metadata.name}").read_text() == "0"

        node = first.spec.node_name  # a spot VM taken back: the node goes, no drain
        await kube.core.patch_node(node, {"metadata": {"finalizers": None}},
                                   _content_type="application/merge-patch+json")
        await kube.core.delete_node(node)
        await wait_for(lambda: _condition_of(jobs.job("resume"), "Complete"), timeout=240,
                       interval=1, what="the job to complete on a new pod")

        job = await jobs.job("resume")
        assert not job["status"].get("failed"), job["status"]  # the disruption: Ignore
        assert not (job["status"].get("uncountedTerminatedPods") or {}).get("failed")
        assert job["status"]["succeeded"] == 1
        gone = pod_history[f"{TRAINERS}/{first.metadata.name}"][-1]
        assert [c["type"] for c in gone["status"]["conditions"]
                if c["type"] == "DisruptionTarget" and c["status"] == "True"], gone["status"]
        (second,) = [p for p in await jobs.pods("resume") if p.metadata.uid != first.metadata.uid]
        assert second.spec.node_name != node
        assert second.status.phase == "Succeeded"
        (status,) = second.status.container_statuses
        assert status.state.terminated.exit_code == 0  # the process's, through kwok
        assert (home / f"found-{second.metadata.name}").read_text() == "1"
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
