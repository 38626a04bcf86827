"""[aks] #28 item 2, at the cluster tier: a training job mounts the home of its user's
running notebook, and on AKS that home is a ReadWriteOnce Azure Disk (``managed-csi``,
the chart's ``singleuser.storage`` in helm-values/values.yaml) attached to the
notebook's node. A job of another pool runs on another node, where the disk cannot be
attached while the notebook runs: kube-controller-manager's attach-detach controller
reports ``Multi-Attach error`` and the job's pod never starts (in the dev cluster as on
AKS: jupyterhub_gpu/devcluster/storage.py; the mechanism is test_storage.py's).

The notebook is spawned under the z2jh chart's config of KubeSpawner
(tests/z2jh_chart.py) with our hub config; the job is built by the gpu-jobs service's
own path (check_submission, job_request, build_job) from that notebook's pod and
created with the hub's identity. Team data-science: the notebook on pool t4dev, the
job (``cpu-job``) on pool cpu."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.builders.job import build_job
from jupyterhub_gpu.contract import JOB_NAME_LABEL
from jupyterhub_gpu.hub.config import configure_hub
from jupyterhub_gpu.jobs.request import check_submission, job_request
from jupyterhub_gpu.spec.grant import UserRef
from tests import z2jh_chart

from .conftest import wait_for
from .test_jobs import hub_batch  # noqa: F401 - the fixture

USER, GROUPS, NAMESPACE = "hana", frozenset({"data-science"}), "jhub-data-science"


@pytest.mark.slow  # it waits a minute for a pod that does not start
@pytest.mark.xfail(strict=True, reason=(
    "[aks] #28 item 2: the job mounts the notebook's ReadWriteOnce managed-csi home, "
    "attached to the notebook's node; off that node the job's pod sits in Multi-Attach "
    "error"))
async def test_a_job_off_the_notebooks_node_runs_with_the_users_home(
        spawn, kube, cluster_spec_path, cluster_platform, hub_batch):  # noqa: F811
    config = z2jh_chart.kubespawner_config(z2jh_chart.helm_values())
    configure_hub(config, str(cluster_spec_path))  # our hub.extraConfig, after the chart's
    spawner = await spawn(USER, sorted(GROUPS), "t4-shared", config=config)
    try:
        await _job_runs(spawner, kube, cluster_platform, hub_batch)
    finally:  # the home goes once the notebook has (the PVC protection waits for it)
        await kube.core.delete_namespaced_persistent_volume_claim(spawner.pvc_name, NAMESPACE)


async def _job_runs(spawner, kube, cluster_platform, hub_batch) -> None:  # noqa: F811
    raw = await kube.core.read_namespaced_pod(spawner.pod_name, NAMESPACE)
    notebook = kube.api_client.sanitize_for_serialization(raw)
    assert notebook["status"]["phase"] == "Running"
    home_path = z2jh_chart.get(z2jh_chart.helm_values(), "singleuser.storage.homeMountPath")

    submission = check_submission(cluster_platform, UserRef(USER, GROUPS),
                                  {"profile": "cpu-job", "script": "train.py"}, 0)
    request = job_request(submission, notebook, "job-hana-home", None, USER, home_path)
    assert request.home is not None and request.home.claim_name == spawner.pvc_name
    await hub_batch(build_job(request), run_for="5s")

    async def started():
        pods = (await kube.core.list_namespaced_pod(
            NAMESPACE, label_selector=f"{JOB_NAME_LABEL}={request.name}")).items
        return [p for p in pods if p.status.phase in ("Running", "Succeeded")]

    try:
        (pod, *_) = await wait_for(started, timeout=60, what="the job's pod to run")
    except AssertionError:
        events = (await kube.core.list_namespaced_event(NAMESPACE)).items
        raise AssertionError("the job's pod did not run: " + "; ".join(
            f"{e.involved_object.name}: {e.reason}: {e.message}" for e in events
            if e.involved_object.name.startswith(request.name))) from None
    assert pod.spec.node_name != notebook["spec"]["nodeName"]
