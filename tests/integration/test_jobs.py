"""Training jobs against the real Kueue: a Job built for a job profile and created with
the hub's identity (only the shipped RBAC) is suspended by Kueue's webhook, queued
through the team's LocalQueue with the profile's priority, admitted, given a node by
Karpenter, run by kwok for as long as its pods' run-for annotation says, and
finished; a job of two pods is admitted with quota for both at once, or not at all.

Pool t4train (two nodes of one T4) and team "trainers" (two GPUs of quota, a cohort
of its own) are these tests' alone (platform.yaml)."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.builders.job import Home, JobGrant, JobRequest, build_job
from jupyterhub_gpu.contract import (JOB_COMPLETION_INDEX_ANNOTATION, JOB_NAME_LABEL,
                                     JOB_UID_LABEL)
from jupyterhub_gpu.devcluster.contract import RUN_FOR_ANNOTATION

from .conftest import wait_for

GROUPS = frozenset({"trainers"})
POOL = "t4train"


@pytest.fixture
async def hub_batch(hub_kubeconfig, cluster_platform):
    """The hub's Batch and Core APIs (its ServiceAccount's token); every Job and
    Service made through it is deleted, with the hub's identity too, at the end."""
    from kubernetes_asyncio import client, config

    api_client = await config.new_client_from_config(config_file=str(hub_kubeconfig))
    batch, core = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    made: list[tuple[str, str, str]] = []

    async def create(manifests, run_for: str | None):
        """``run_for``: kwok runs the pods that long; None: the pod runner, if one runs."""
        job, service = manifests
        if run_for is not None:
            job["spec"]["template"]["metadata"].setdefault("annotations", {})[
                RUN_FOR_ANNOTATION] = run_for
        namespace = job["metadata"]["namespace"]
        if service is not None:
            await core.create_namespaced_service(namespace, service)
            made.append(("service", namespace, service["metadata"]["name"]))
        created = await batch.create_namespaced_job(namespace, job)
        made.append(("job", namespace, job["metadata"]["name"]))
        return created

    yield create
    for kind, namespace, name in reversed(made):
        if kind == "job":
            await batch.delete_namespaced_job(name, namespace,
                                              propagation_policy="Foreground")
        else:
            await core.delete_namespaced_service(name, namespace)
    await api_client.close()


async def test_every_example_job_profile_builds_objects_the_api_server_accepts(
        hub_kubeconfig, cluster_platform, platform):
    """The example spec's job profiles -- a fallback, checkpoints, a home volume, two
    pods -- built for a member of each allowed team and created with the hub's identity
    as a dry run (validation, admission webhooks and RBAC, nothing stored)."""
    from kubernetes_asyncio import client, config

    namespaces = {t.namespace for t in cluster_platform.teams}
    api_client = await config.new_client_from_config(config_file=str(hub_kubeconfig))
    batch, core = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    checked = []
    try:
        for profile in platform.job_profiles:
            team = platform.team_for(set(profile.allowed_groups or platform.teams[0].groups))
            assert team.namespace in namespaces  # the example's teams are the tier's too
            job, service = build_job(JobRequest(
                name=f"dry-{profile.slug}", user_slug="max-mustermann---1ca42713",
                username="Max.Mustermann",
                grant=JobGrant.of(platform, profile, team), image="jupyter/minimal",
                command=("python", "train.py"), home=Home("claim-max", "/home/jovyan"),
                checkpoint_storage=platform.checkpoint_storage))
            if service is not None:
                await core.create_namespaced_service(team.namespace, service, dry_run="All")
            created = await batch.create_namespaced_job(team.namespace, job, dry_run="All")
            assert created.spec.suspend is True, profile.slug  # Kueue's webhook ran
            checked.append((profile.slug, service is not None))
    finally:
        await api_client.close()
    assert ("a100-ddp-2", True) in checked and len(checked) == len(platform.job_profiles)


def _request(platform, slug: str, name: str) -> JobRequest:
    team = platform.team_for(GROUPS)
    return JobRequest(name=name, user_slug="tia", username="tia",
                      grant=JobGrant.of(platform, platform.job_profile(slug), team),
                      image="jupyter/minimal", command=("python", "train.py"))


def _condition(obj: dict, kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


class Jobs:
    """Reads, with the admin's client, for the assertions."""

    def __init__(self, kube, namespace: str):
        from kubernetes_asyncio import client

        self.kube, self.namespace = kube, namespace
        self.batch = client.BatchV1Api(kube.api_client)

    async def job(self, name: str) -> dict:
        job = await self.batch.read_namespaced_job(name, self.namespace)
        return self.kube.api_client.sanitize_for_serialization(job)

    async def workload(self, uid: str) -> dict | None:
        return next((w for w in await self.kube.workloads(self.namespace)
                     if w["metadata"]["labels"].get(JOB_UID_LABEL) == uid), None)

    async def pods(self, name: str) -> list:
        return (await self.kube.core.list_namespaced_pod(
            self.namespace, label_selector=f"{JOB_NAME_LABEL}={name}")).items

    async def admitted(self, uid: str) -> dict | None:
        workload = await self.workload(uid)
        return workload if workload and _condition(workload, "Admitted") else None


async def test_a_job_is_queued_admitted_run_and_finished(hub_batch, kube, cluster_platform):
    team = cluster_platform.team_for(GROUPS)
    jobs = Jobs(kube, team.namespace)
    created = await hub_batch(build_job(_request(cluster_platform, "t4-train", "train-one")),
                              run_for="20s")
    assert created.spec.suspend is True  # Kueue's webhook: held until admitted
    uid = created.metadata.uid

    workload = await wait_for(lambda: jobs.workload(uid), what="the Job's Workload")
    assert workload["spec"]["queueName"] == team.local_queue
    assert workload["spec"]["priorityClassRef"]["name"] == "batch"
    assert workload["spec"]["priority"] == cluster_platform.priority("batch").value

    workload = await wait_for(lambda: jobs.admitted(uid), timeout=60, what="admission")
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert set(assignment["flavors"].values()) == {POOL}
    assert await wait_for(lambda: kube.pool_nodes(POOL), timeout=60,
                          what=f"a Karpenter node for pool {POOL}")

    async def running():
        pods = await jobs.pods("train-one")
        return pods if pods and pods[0].status.phase == "Running" else None

    (pod,) = await wait_for(running, timeout=90, what="the Job's pod to run")
    assert (await kube.core.read_node(pod.spec.node_name)).metadata.labels[
        "karpenter.sh/nodepool"] == POOL
    assert not _condition(await jobs.job("train-one"), "Complete")  # runs its 20 s

    await wait_for(lambda: _condition_of(jobs.job("train-one"), "Complete"), timeout=120,
                   what="the Job to complete")
    (pod,) = await jobs.pods("train-one")
    assert pod.status.phase == "Succeeded"
    await wait_for(lambda: _condition_of(jobs.workload(uid), "Finished"), timeout=60,
                   what="the Workload to be finished")


async def _condition_of(read, kind: str) -> bool:
    obj = await read
    return bool(obj) and _condition(obj, kind)


async def test_a_two_pod_job_is_admitted_for_both_pods_or_not_at_all(
        hub_batch, kube, cluster_platform):
    team = cluster_platform.team_for(GROUPS)
    jobs = Jobs(kube, team.namespace)
    # one of the team's two GPUs taken for a while
    hold = await hub_batch(build_job(_request(cluster_platform, "t4-train", "hold")),
                           run_for="25s")
    await wait_for(lambda: jobs.admitted(hold.metadata.uid), timeout=60,
                   what="the first job's admission")
    ddp = await hub_batch(build_job(_request(cluster_platform, "t4-ddp-2", "ddp")),
                          run_for="15s")

    # one GPU is free, but the job needs two: no pod, not one
    workload = await wait_for(lambda: jobs.workload(ddp.metadata.uid), what="its Workload")
    assert not _condition(workload, "QuotaReserved")
    assert await jobs.pods("ddp") == []
    assert (await jobs.job("ddp"))["spec"]["suspend"] is True
    assert not _condition(await jobs.job("hold"), "Complete")  # still holding the GPU

    # once the first job is done, quota for both pods is reserved at once
    workload = await wait_for(lambda: jobs.admitted(ddp.metadata.uid), timeout=120,
                              what="the two-pod job's admission")
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["count"] == 2
    assert set(assignment["flavors"].values()) == {POOL}
    assert _condition(await jobs.job("hold"), "Complete")

    async def both_running():
        pods = await jobs.pods("ddp")
        return pods if len(pods) == 2 and all(p.status.phase == "Running" for p in pods) \
            else None

    pods = await wait_for(both_running, timeout=90, what="both pods to run")
    indices = sorted(p.metadata.annotations[JOB_COMPLETION_INDEX_ANNOTATION] for p in pods)
    assert indices == ["0", "1"]
    # each pod is <job>-<index> under the headless Service's subdomain: MASTER_ADDR
    assert sorted(p.spec.hostname for p in pods) == ["ddp-0", "ddp-1"]
    assert {p.spec.subdomain for p in pods} == {"ddp"}
    await wait_for(lambda: _condition_of(jobs.job("ddp"), "Complete"), timeout=120,
                   what="the two-pod job to complete")
