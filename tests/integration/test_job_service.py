"""Training jobs from a notebook, end to end: the demo's JupyterHub (as the hub's
ServiceAccount, with the RBAC we ship) runs the gpu-jobs service; alice, with a running
server, submits jobs with ``jupyterhub-gpu job`` in a subprocess that has only her
server's environment; the Jobs are queued by Kueue and "run" by kwok for the demo's
run-for time; ``job list`` says where each is, in words, as it goes; forged requests
create nothing; cancel leaves nothing behind."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import timedelta
from pathlib import Path

import pytest

from jupyterhub_gpu.builders.job import home_of
from jupyterhub_gpu.contract import (ENV_API_TOKEN, ENV_JOBS_URL, JOBS_API_PATH,
                                     JOBS_SERVICE_NAME, PRIORITY_LABEL, QUEUE_LABEL)
from jupyterhub_gpu.devcluster.contract import ENV_DEMO_JOB_RUN_FOR
from jupyterhub_gpu.jobs.cli import Exit

from .conftest import wait_for
from .job_terminal import CLI, Terminal, send, snapshot, terminal_env
from .job_terminal import nothing_left_of as _nothing_left_in
from .test_demo import URL, _login, _serving, _spawn_and_wait, _xsrf

NAMESPACE = "jhub-data-science"
RUN_FOR = "15s"


@pytest.fixture
async def hub(cluster, cluster_spec_path, hub_kubeconfig, tmp_path, monkeypatch):
    """The demo's hub, its training jobs running for RUN_FOR; alice logged in."""
    monkeypatch.setenv(ENV_DEMO_JOB_RUN_FOR, RUN_FOR)
    async with _serving(cluster, cluster_spec_path, hub_kubeconfig, tmp_path / "hub") as http:
        await _login(http, "alice")
        yield http


async def _notebook(kube, user: str) -> dict:
    pod = await kube.core.read_namespaced_pod(f"jupyter-{user}", NAMESPACE)
    return kube.api_client.sanitize_for_serialization(pod)


async def _alice(hub, kube, tmp_path) -> tuple[Terminal, dict]:
    await _spawn_and_wait(hub, "alice", "t4-shared")
    home = tmp_path / "home"
    (home / "train").mkdir(parents=True)
    (home / "train" / "train.py").write_text("print('training')\n")
    notebook = await _notebook(kube, "alice")
    return Terminal(terminal_env(notebook, home), home / "train"), notebook


async def test_submit_follow_and_cancel_jobs_from_a_notebook_terminal(
        hub, kube, cluster_platform, tmp_path):
    from kubernetes_asyncio import client

    terminal, notebook = await _alice(hub, kube, tmp_path)
    team = cluster_platform.team_for({"data-science"})
    code, out, err = await terminal.job("submit", "train.py", "--profile", "cpu-job", "--",
                                        "--epochs", "3")
    assert code == 0, err
    first = out.split(":")[0]
    job = (await client.BatchV1Api(kube.api_client).read_namespaced_job(first, NAMESPACE)).to_dict()
    labels, pod_spec = job["metadata"]["labels"], job["spec"]["template"]["spec"]
    assert (labels[QUEUE_LABEL], labels[PRIORITY_LABEL]) == (team.local_queue, "batch")
    (container,) = pod_spec["containers"]
    assert container["image"] == notebook["spec"]["containers"][0]["image"]
    # in the script's directory of the home: where the user's code is
    assert container["command"] == ["python", "train.py", "--epochs", "3"]
    home = home_of(notebook)
    if home is not None:
        assert container["working_dir"] == f"{home.mount_path.rstrip('/')}/train"
        claims = [v["persistent_volume_claim"]["claim_name"] for v in pod_spec["volumes"]
                  if v.get("persistent_volume_claim")]
        assert home.claim_name in claims
    assert pod_spec["automount_service_account_token"] is False
    assert notebook["spec"]["automountServiceAccountToken"] is False

    code, out, err = await terminal.job("submit", "train.py", "--profile", "cpu-job")
    assert code == 0, err
    second = out.split(":")[0]
    before = await snapshot(kube, cluster_platform)
    code, out, err = await terminal.job("submit", "train.py", "--profile", "cpu-job")
    assert code == 1 and "queued or running" in err and "(HTTP 400)" in err, (out, err)
    assert await snapshot(kube, cluster_platform) == before, "over the limit: nothing made"

    seen: dict[str, list[str]] = {first: [], second: []}

    async def both_done():
        for name, words in (await terminal.statuses()).items():
            if name in seen and (not seen[name] or seen[name][-1] != words):
                seen[name].append(words)
        return all(s and s[-1].startswith("succeeded") for s in seen.values())

    await wait_for(both_done, timeout=180, interval=1, what="both jobs to succeed")
    print("seen:", json.dumps(seen, indent=1))
    assert "running on pool cpu" in seen[first]
    assert f"queued in {team.local_queue}: position 1 of 1" in seen[second]
    assert seen[second].index(f"queued in {team.local_queue}: position 1 of 1") < \
        seen[second].index("running on pool cpu")
    code, out, err = await terminal.job("status", first)
    assert code == 0 and "status:    succeeded after" in out, (out, err)

    code, out, err = await terminal.job("submit", "train.py", "--profile", "cpu-job")
    third = out.split(":")[0]
    await wait_for(lambda: terminal.is_(third, "running on pool cpu"), timeout=60,
                   what="the third job to run")
    code, out, err = await terminal.job("logs", third)
    # kwok: no kubelet logs; the service answers 503, a service error
    assert code == Exit.SERVICE_ERROR and "serves no logs" in err, (out, err)
    code, out, err = await terminal.job("cancel", third)
    assert code == 0 and out.strip() == f"{third}: cancelling", (out, err)
    await wait_for(lambda: _nothing_left_of(kube, third), timeout=60,
                   what=f"{third}'s Job, pods and Workload to go")
    code, out, err = await terminal.job("status", third)
    assert code == 1 and f"You have no job '{third}'" in err
    rows = await wait_for(lambda: _ledger_jobs(tmp_path / "hub" / "hub", 3), timeout=90,
                          what="the jobs service to record the three jobs in the usage ledger")
    _check_job_rows(rows, first, second, third, cluster_platform.pool("cpu"))


async def _ledger_jobs(hub_dir: Path, count: int):
    """The usage ledger's job rows, once ``count`` of them are stopped."""
    from jupyterhub_gpu.usage.config import default_url
    from jupyterhub_gpu.ledger.store import Kind, Ledger

    ledger = Ledger(default_url(str(hub_dir)))
    try:
        rows = {r.server: r for r in await ledger.rows(Kind.JOB)}
    finally:
        ledger.dispose()
    return rows if sum(r.stopped_at is not None for r in rows.values()) >= count else None


def _check_job_rows(rows, first, second, third, pool):
    """Two jobs ran to completion (the second after waiting in the queue), the third
    was cancelled by its user while it ran."""
    from jupyterhub_gpu.ledger.store import StopReason

    assert sorted(rows) == sorted([first, second, third]), rows
    for row in rows.values():
        assert (row.user, row.team, row.profile, row.pools, row.pool, row.gpu_units) == (
            "alice", "data-science", "cpu-job", "cpu", "cpu", 0), row
        assert row.price_per_unit_hour == pool.price_per_unit_hour, row
        assert row.requested_at <= row.admitted_at <= row.running_at < row.stopped_at, row
        assert row.queue_wait_seconds == (row.admitted_at - row.requested_at).total_seconds()
    assert [rows[n].stop_reason for n in (first, second, third)] == [
        StopReason.COMPLETED, StopReason.COMPLETED, StopReason.USER]
    # the second waited for the first (jobsPerUser 2, one cpu node's quota)
    assert rows[second].admitted_at >= rows[first].stopped_at - timedelta(seconds=1), rows


FORGED = [
    ({"profile": "cpu-job", "script": "train.py", "namespace": "jhub-ml-eng"}, "namespace"),
    ({"profile": "cpu-job", "script": "train.py", "image": "evil/miner"}, "image"),
    ({"profile": "t4-train", "script": "train.py"}, "may not submit job profile 't4-train'"),
    ({"profile": "nope", "script": "train.py"}, "Unknown job profile 'nope'"),
    ({"profile": "cpu-job", "script": "../../etc/x.py"}, "outside your home"),
    ({"profile": "cpu-job", "script": "/etc/x.py"}, "relative to your home"),
    ({"profile": "cpu-job", "script": "train.py", "command": ["sh"]}, "Unknown field"),
]


async def test_forged_submits_are_refused_and_create_nothing(hub, kube, cluster_platform,
                                                             tmp_path):
    terminal, _ = await _alice(hub, kube, tmp_path)
    url = terminal.env[ENV_JOBS_URL] + "api/jobs"
    token = terminal.env[ENV_API_TOKEN]
    before = await snapshot(kube, cluster_platform)
    for body, why in FORGED:
        status, answer = await send("POST", url, token, body)
        assert status == 400 and why in answer["error"], (body, status, answer)
    assert (await send("POST", url, None, FORGED[0][0]))[0] == 403, "no token, nothing"
    assert (await send("POST", url, "not-a-token", FORGED[0][0]))[0] == 403
    assert await snapshot(kube, cluster_platform) == before


async def _nothing_left_of(kube, name: str) -> bool:
    return await _nothing_left_in(kube, NAMESPACE, name)


async def _jobs_in(kube) -> dict[str, bool]:
    """The team namespace's Jobs, and whether each is being deleted."""
    from kubernetes_asyncio import client

    jobs = (await client.BatchV1Api(kube.api_client).list_namespaced_job(NAMESPACE)).items
    return {j.metadata.name: j.metadata.deletion_timestamp is not None for j in jobs}


async def test_a_forged_same_origin_request_with_the_victims_cookie_is_refused(
        hub, kube, tmp_path):
    """What a page under /user/<attacker>/ (the service's origin when subdomain_host is
    unset) can make alice's browser send: her OAuth cookie for the service with
    ``Authorization: token x``, and no XSRF token or a wrong one. JupyterHub's HubAuth
    falls back to the cookie when the hub does not know the header's token
    (jupyterhub/services/auth.py, HubAuth._get_user): the service answers such a
    request as the token's owner or not at all, so POST and DELETE are refused and
    nothing is created or deleted. Her own token needs no XSRF token (the CLI); her
    browser's write is let in with the XSRF token a page view of the service gave it."""
    terminal, _ = await _alice(hub, kube, tmp_path)
    code, out, err = await terminal.job("submit", "train.py", "--profile", "cpu-job")
    assert code == 0, err  # a valid token, no XSRF token
    victims = out.split(":")[0]
    api = f"{URL}/services/{JOBS_SERVICE_NAME}/{JOBS_API_PATH}"  # through the proxy
    async with hub.get(api) as r:  # her browser opens the service: OAuth, its cookie
        assert r.status == 200 and str(r.url) == api, r.url
        assert victims in {j["name"] for j in (await r.json())["jobs"]}
    before = await _jobs_in(kube)
    page = {"Sec-Fetch-Mode": "cors", "Sec-Fetch-Site": "same-origin",
            "Origin": URL, "Referer": f"{URL}/user/mallory/lab"}
    body = {"profile": "cpu-job", "script": "train/train.py"}
    for extra in ({"Authorization": "token x"}, {"Authorization": "token x", "X-XSRFToken": "x"},
                  {}, {"X-XSRFToken": "x"}):
        headers = {**page, **extra}
        async with hub.post(api, json=body, headers=headers) as r:
            assert r.status == 403, (extra, r.status, await r.text())
        async with hub.delete(f"{api}/{victims}", headers=headers) as r:
            assert r.status == 403, (extra, r.status, await r.text())
    assert await _jobs_in(kube) == before, "the forged requests changed nothing"
    assert before[victims] is False
    xsrf = _xsrf(hub, f"/services/{JOBS_SERVICE_NAME}/")
    async with hub.post(api, json={**body, "profile": "nope"},
                        headers={**page, "X-XSRFToken": xsrf}) as r:
        said = await r.json()
        assert r.status == 400 and "Unknown job profile 'nope'" in said["error"], said
    assert (await terminal.job("cancel", victims))[0] == 0
    await wait_for(lambda: _nothing_left_of(kube, victims), timeout=60, what="the cancel")


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"
EXAMPLE_JOB = "job-alice-1a2b3c"  # the name the guide's commands use


def _guide_commands() -> list[str]:
    section = GUIDE.read_text().split("## Run a training job from your notebook", 1)[1]
    lines = [line.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```",
                                                                    section, re.S)
             for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line and not line.startswith("cd ")]


async def test_the_user_guides_commands_run_as_written(hub, kube, tmp_path):
    """Each command of the guide's section, in a shell with the server's environment;
    only the job's name differs (it is made at submit)."""
    terminal, _ = await _alice(hub, kube, tmp_path)
    name = None
    for command in _guide_commands():
        command = command.replace(EXAMPLE_JOB, name or EXAMPLE_JOB)
        proc = await asyncio.create_subprocess_shell(
            command.replace("jupyterhub-gpu ", f"{CLI} ", 1), env=terminal.env,
            cwd=terminal.cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = (b.decode() for b in await proc.communicate())
        if " job logs " in command:  # kwok serves no logs: the guide says so
            assert proc.returncode == Exit.SERVICE_ERROR, err
            assert "The cluster serves no logs of pod" in err, err
            continue
        assert proc.returncode == 0, (command, out, err)
        if " job submit " in command:
            name = out.split(":")[0]
            await wait_for(lambda: terminal.is_(name, "running on pool cpu"), timeout=60,
                           what="the job to run")
        if command.startswith("curl -X POST"):  # a second job, through the REST API
            posted = json.loads(out)
            assert posted["command"] == ["python", "train.py", "--epochs", "3"], posted
            assert (await terminal.job("cancel", posted["name"]))[0] == 0
            await wait_for(lambda: _nothing_left_of(kube, posted["name"]), timeout=60,
                           what="the second job's cancel")
        elif command.startswith("curl"):  # after the cancel: at most "cancelling"
            assert all(j["name"] != name or j["state"] == "cancelling"
                       for j in json.loads(out)["jobs"]), out
    assert name is not None
    await wait_for(lambda: _nothing_left_of(kube, name), timeout=60, what="the cancel")


async def test_cancel_of_a_multi_pod_job_leaves_no_service_behind(hub, kube, tmp_path):
    """A job of two pods has a headless Service for its rendezvous and a NetworkPolicy
    that lets its pods reach each other, both owned by the Job; the policy selects
    exactly the Job's pods as the API server labels them. Cancel removes both with
    the Job, its pods and its Workload."""
    from kubernetes_asyncio.client import BatchV1Api, NetworkingV1Api

    networking = NetworkingV1Api(kube.api_client)
    terminal, _ = await _alice(hub, kube, tmp_path)
    code, out, err = await terminal.job("submit", "train.py", "--profile", "cpu-ddp-2")
    assert code == 0, err
    name = out.split(":")[0]
    service = await kube.core.read_namespaced_service(name, NAMESPACE)
    assert [(o.kind, o.name) for o in service.metadata.owner_references] == [("Job", name)]
    policy = await networking.read_namespaced_network_policy(name, NAMESPACE)
    assert [(o.kind, o.name) for o in policy.metadata.owner_references] == [("Job", name)]
    await wait_for(lambda: terminal.is_(name, "running on pool cpu"), timeout=60,
                   what="both pods to run")
    job = await BatchV1Api(kube.api_client).read_namespaced_job(name, NAMESPACE)

    async def pods(selector):  # the pods a label selector picks
        found = await kube.core.list_namespaced_pod(NAMESPACE, label_selector=",".join(
            f"{k}={v}" for k, v in selector.match_labels.items()))
        return sorted(p.metadata.name for p in found.items)

    selected = await pods(policy.spec.pod_selector)
    assert len(selected) == 2 and selected == await pods(job.spec.selector)
    assert (await terminal.job("cancel", name))[0] == 0

    async def gone():
        services = (await kube.core.list_namespaced_service(NAMESPACE)).items
        policies = (await networking.list_namespaced_network_policy(NAMESPACE)).items
        return await _nothing_left_of(kube, name) and name not in {
            s.metadata.name for s in [*services, *policies]}

    await wait_for(gone, timeout=60,
                   what=f"{name}'s Job, pods, Workload, Service and NetworkPolicy to go")
