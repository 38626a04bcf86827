"""A multi-pod job's own NetworkPolicy, made by the jobs service's cluster code with
the hub's credentials (``KUBECONFIG`` is the hub's in this tier): if it cannot be
made, the Job is not left behind."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.builders.job import JobGrant, JobRequest, build_job, peer_policy

from .conftest import wait_for

GROUPS = frozenset({"data-science"})


async def test_a_job_whose_policy_cannot_be_made_is_deleted_again(cluster, cluster_platform,
                                                                  kube):
    """The policy's name is taken (made first, as the admin): the create fails with
    409, and the Job just created goes again, with the Service it owns."""
    from kubernetes_asyncio.client import ApiException, BatchV1Api, NetworkingV1Api
    from kubespawner.clients import load_config

    from jupyterhub_gpu.jobs import cluster as jobs_cluster

    team = cluster_platform.team_for(GROUPS)
    req = JobRequest(name="policy-taken", user_slug="tia", username="tia",
                     image="jupyter/minimal",
                     grant=JobGrant.of(cluster_platform,
                                       cluster_platform.job_profile("cpu-ddp-2"), team),
                     command=("python", "train.py"))
    job, service = build_job(req)
    policy = peer_policy(req)
    ns = team.namespace
    networking, batch = NetworkingV1Api(kube.api_client), BatchV1Api(kube.api_client)
    await networking.create_namespaced_network_policy(ns, {
        "metadata": {"name": req.name}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}})
    try:
        load_config()
        with pytest.raises(ApiException) as raised:
            await jobs_cluster.create(job, service, policy)
        assert raised.value.status == 409

        async def gone():
            jobs = (await batch.list_namespaced_job(ns)).items
            services = (await kube.core.list_namespaced_service(ns)).items
            return req.name not in {o.metadata.name for o in [*jobs, *services]}

        await wait_for(gone, timeout=60, what="the Job and its Service to go")
    finally:
        await networking.delete_namespaced_network_policy(req.name, ns)
