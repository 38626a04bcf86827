"""Training jobs from a notebook of the hub deployed from the real z2jh 4.4.0 chart
(:mod:`.chart_hub`: ``helm template`` in the admin guide's install order, the hub
Deployment's container run with the chart's own ``jupyterhub_config.py``, so the
gpu-jobs service is the managed service helm-values/values.yaml's ``hub.extraConfig``
adds with ``add_jobs_service``). Users of team data-science start their servers
through the hub's REST API; jobs are submitted as ``jupyterhub-gpu job`` in the
notebook's terminal submits them: to the URL in the server's environment
(``JUPYTERHUB_GPU_JOBS_URL``, reached here as the Service would route it) with the
server's own API token, which the chart's hub gave the scope
``access:services!service=gpu-jobs``.

The home is the chart's ``singleuser.storage`` as helm-values/values.yaml sets it: a
ReadWriteMany Azure Files share (``azurefile-csi-premium``) that KubeSpawner claims
(``claim-{username}``) and that needs no attaching, so pods on any node mount it
(jupyterhub_gpu/devcluster/storage.py; kube-controller-manager's real attach-detach
controller would refuse a ReadWriteOnce disk a second node). A job's pods run, by the
dev cluster's pod runner, the job's command in that home (the runner's directory of
the claim), where the test puts the user's script first.

* A job on the notebook's own node (the cpu pool, a notebook of profile ``cpu``):
  Kueue admits it, ``job list`` reports it running, requests without a valid token of
  its user create or cancel nothing, and ``job cancel`` leaves nothing behind.
* A job of another pool than the notebook's (the notebook on t4dev, ``cpu-job`` on
  cpu) mounts the home on another node and runs ([aks] #28 item 2: on a ReadWriteOnce
  ``managed-csi`` home the attach-detach controller reported ``Multi-Attach error``
  and the job's pod never started; the mechanism is test_storage.py's)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from jupyterhub_gpu.builders.job import home_of
from jupyterhub_gpu.contract import (ENV_API_TOKEN, ENV_JOBS_URL, JOB_NAME_LABEL,
                                     JOBS_ACCESS_SCOPE, JOBS_API_PATH, USERNAME_KEY)
from jupyterhub_gpu.devcluster.jobprocess import VOLUMES_DIR
from tests import z2jh_chart

from . import chart_hub, chart_hubapi
from .conftest import wait_for
from .job_terminal import Terminal, nothing_left_of, send, server_env, snapshot, terminal_env

pytestmark = pytest.mark.skipif(
    not z2jh_chart.CHART.is_dir(),
    reason=f"z2jh chart not found at {z2jh_chart.CHART}: the chart is needed beside "
           f"the checkout")

GROUP, NAMESPACE = "data-science", "jhub-data-science"
#: the script a job runs: it leaves a mark in its working directory (the user's home,
#: where the script is), then trains until it is cancelled
SCRIPT = "train.py", ("import time\nopen('started', 'a').write('a pod\\n')\n"
                      "while True:\n    time.sleep(1)\n")


@pytest.fixture(scope="module")
async def chart(cluster, cluster_spec_path, tmp_path_factory):
    """The chart's hub, and the directory its pod runner keeps the pods' volumes in."""
    workdir = tmp_path_factory.mktemp("chart-hub")
    async with chart_hub.serving(cluster, cluster_spec_path, workdir) as (hub, http):
        yield hub, http, workdir


async def _notebook(chart, kube, user: str, profile: str) -> dict:
    """Start ``user``'s server of ``profile`` through the hub's REST API; its pod."""
    hub, http, _ = chart
    await chart_hubapi.add_user(http, hub, user, [GROUP])
    assert await chart_hubapi.start_server(http, hub, user, profile) in (201, 202)
    await wait_for(lambda: chart_hubapi.ready(http, hub, user), timeout=180,
                   what=f"{user}'s server")
    (pod,) = (await kube.core.list_namespaced_pod(
        NAMESPACE, label_selector=f"{USERNAME_KEY}={user}")).items
    return kube.api_client.sanitize_for_serialization(pod)


def _home_claim(hub, notebook: dict) -> str:
    home = home_of(notebook, z2jh_chart.get(hub.values, "singleuser.storage.homeMountPath"))
    assert home is not None, "the chart's notebook mounts its home claim"
    return home.claim_name


def _terminal(chart, notebook: dict, directory: str = "") -> Terminal:
    """A terminal of that server, in ``directory`` of its home (the claim's directory
    the pod runner gives the job's pods), with the user's script in it."""
    hub, _, workdir = chart
    home = Path(workdir, VOLUMES_DIR, NAMESPACE, _home_claim(hub, notebook))
    path = home / directory
    path.mkdir(parents=True, exist_ok=True)
    (path / SCRIPT[0]).write_text(SCRIPT[1])
    jobs_url = hub.local_url(server_env(notebook)[ENV_JOBS_URL])
    return Terminal(terminal_env(notebook, home, jobs_url), path)


async def _end(chart, kube, user: str, notebook: dict, terminal: Terminal, job: str | None):
    """Cancel the job, stop the server, delete its home (KubeSpawner keeps it)."""
    hub, http, _ = chart
    if job is not None:
        await terminal.job("cancel", job)
        await wait_for(lambda: nothing_left_of(kube, NAMESPACE, job), timeout=60,
                       what=f"{job} to go")
    await chart_hubapi.stop_server(http, hub, user)
    await kube.core.delete_namespaced_persistent_volume_claim(_home_claim(hub, notebook),
                                                              NAMESPACE)


async def _submit(terminal: Terminal, profile: str) -> str:
    # the hub answers before it has started its managed services
    url = f"{terminal.env[ENV_JOBS_URL]}{JOBS_API_PATH}"
    await wait_for(lambda: _answers(url, terminal.env[ENV_API_TOKEN]), timeout=60,
                   what="the gpu-jobs service to answer")
    code, out, err = await terminal.job("submit", SCRIPT[0], "--profile", profile)
    assert code == 0, (out, err)
    return out.split(":")[0]


async def _answers(url: str, token: str) -> bool:
    try:
        return (await send("GET", url, token))[0] == 200
    except aiohttp.ClientError:
        return False


async def _admitted(kube, job: str) -> bool:
    for wl in await kube.workloads(NAMESPACE):
        if any(o["name"] == job for o in wl["metadata"].get("ownerReferences", [])):
            return any(c["type"] == "Admitted" and c["status"] == "True"
                       for c in wl.get("status", {}).get("conditions", []))
    return False


async def test_a_job_on_the_notebooks_node_runs_and_only_its_user_can_cancel_it(
        chart, kube, cluster_platform):
    from kubernetes_asyncio.client import NetworkingV1Api

    hub, http, _ = chart
    user, other = "ivo", "mallory"
    # the notebook's node is then the pool's only one, and the job's pods fit beside it
    await wait_for(lambda: kube.pool_is_empty("cpu"), timeout=120,
                   what="pool cpu's earlier nodes to go")
    notebook = await _notebook(chart, kube, user, "cpu")
    terminal, job = _terminal(chart, notebook), None
    try:
        job = await _submit(terminal, "cpu-ddp-2")  # two pods: a Service, a NetworkPolicy
        await wait_for(lambda: _admitted(kube, job), timeout=60, what="Kueue to admit it")
        await wait_for(lambda: terminal.is_(job, "running on pool cpu"), timeout=90,
                       what="job list to report it running")
        pods = (await kube.core.list_namespaced_pod(
            NAMESPACE, label_selector=f"{JOB_NAME_LABEL}={job}")).items
        assert {p.spec.node_name for p in pods} == {notebook["spec"]["nodeName"]}
        assert len(pods) == 2 and all(p.status.phase == "Running" for p in pods)
        marks = terminal.cwd / "started"  # each pod ran the script in the user's home
        await wait_for(lambda: marks.exists() and len(marks.read_text().splitlines()) == 2,
                       timeout=30, what="both pods to run the user's script")

        url = f"{terminal.env[ENV_JOBS_URL]}{JOBS_API_PATH}"
        before = await snapshot(kube, cluster_platform)
        body = {"profile": "cpu-job", "script": SCRIPT[0]}
        for token in (None, "not-a-token", hub.token):  # the last: the hub's, no scope
            assert (await send("POST", url, token, body))[0] == 403, token
        # another user's own valid token for the service sees and cancels none of ivo's
        await chart_hubapi.add_user(http, hub, other, [GROUP])
        async with http.post(f"{hub.api}/users/{other}/tokens", headers=hub.headers(),
                             json={"scopes": [JOBS_ACCESS_SCOPE]}) as r:
            assert r.status == 201, await r.text()
            theirs = (await r.json())["token"]
        status, answer = await send("GET", url, theirs)
        assert status == 200 and answer["jobs"] == [], answer
        for method in ("GET", "DELETE"):
            status, answer = await send(method, f"{url}/{job}", theirs)
            assert status == 404 and "You have no job" in answer["error"], (method, answer)
        assert await snapshot(kube, cluster_platform) == before, "forged: nothing changed"
        assert await terminal.is_(job, "running on pool cpu")

        code, out, err = await terminal.job("cancel", job)
        assert code == 0 and out.strip() == f"{job}: cancelling", (out, err)
        networking = NetworkingV1Api(kube.api_client)

        async def gone():
            services = (await kube.core.list_namespaced_service(NAMESPACE)).items
            policies = (await networking.list_namespaced_network_policy(NAMESPACE)).items
            return await nothing_left_of(kube, NAMESPACE, job) and job not in {
                s.metadata.name for s in [*services, *policies]}

        await wait_for(gone, timeout=60,
                       what=f"{job}'s Job, pods, Workload, Service and NetworkPolicy to go")
        job = None
    finally:
        await _end(chart, kube, user, notebook, terminal, job)


async def test_a_job_off_the_notebooks_node_runs_with_the_users_home(chart, kube):
    from kubernetes_asyncio.client import BatchV1Api

    user = "hana"
    notebook = await _notebook(chart, kube, user, "t4-shared")  # on pool t4dev
    # the user's code in a directory of the home, where they type `job submit`
    terminal, job = _terminal(chart, notebook, "project"), None
    try:
        job = await _submit(terminal, "cpu-job")  # on pool cpu
        created = await BatchV1Api(kube.api_client).read_namespaced_job(job, NAMESPACE)
        assert created.metadata.labels[USERNAME_KEY] == user  # the service made it

        async def started():
            pods = (await kube.core.list_namespaced_pod(
                NAMESPACE, label_selector=f"{JOB_NAME_LABEL}={job}")).items
            return [p for p in pods if p.status.phase in ("Running", "Succeeded")]

        try:
            (pod, *_) = await wait_for(started, timeout=60, what="the job's pod to run")
        except AssertionError:
            events = [f"{e.involved_object.name}: {e.reason}: {e.message}"
                      for e in (await kube.core.list_namespaced_event(NAMESPACE)).items
                      if e.involved_object.name.startswith(job)]
            # a Multi-Attach error here: the home is a ReadWriteOnce disk again
            raise AssertionError("the job's pod did not run: " + "; ".join(events)) from None
        assert pod.spec.node_name != notebook["spec"]["nodeName"]
        # it ran in the script's directory: its mark is beside the script
        marks = terminal.cwd / "started"
        await wait_for(lambda: marks.exists(), timeout=30, what="the script to run there")
    finally:
        await _end(chart, kube, user, notebook, terminal, job)
