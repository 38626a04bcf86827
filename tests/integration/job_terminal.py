"""The gpu-jobs service as a notebook's user calls it, for the tests of whichever hub
runs it (the demo's: test_job_service.py; the z2jh chart's: test_job_home.py): the
``jupyterhub-gpu job`` command in a subprocess that has only the server's environment,
a raw POST with any token, and what the team namespace holds of a job."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import aiohttp

from jupyterhub_gpu.contract import ENV_API_TOKEN, ENV_JOBS_URL, JOB_NAME_LABEL

CLI = Path(sys.executable).parent / "jupyterhub-gpu"


def server_env(notebook: dict) -> dict[str, str]:
    """The literal environment variables of a notebook pod's container."""
    return {e["name"]: e["value"] for e in notebook["spec"]["containers"][0]["env"]
            if "value" in e}


def terminal_env(notebook: dict, home: Path, jobs_url: str | None = None) -> dict[str, str]:
    """What a terminal of that server has: its pod's token and jobs URL (``jobs_url``:
    where that URL is reached from here, if not itself), and its home."""
    env = server_env(notebook)
    return {"PATH": os.environ["PATH"], "HOME": str(home), ENV_API_TOKEN: env[ENV_API_TOKEN],
            ENV_JOBS_URL: jobs_url or env[ENV_JOBS_URL]}


class Terminal:
    """``jupyterhub-gpu job ...`` run as a notebook terminal would run it."""

    def __init__(self, env: dict[str, str], cwd: Path):
        self.env, self.cwd = env, cwd

    async def job(self, *args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            str(CLI), "job", *args, env=self.env, cwd=self.cwd,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        return proc.returncode, out.decode(), err.decode()

    async def statuses(self) -> dict[str, str]:
        """``job list``: each job's name -> its status in words."""
        code, out, err = await self.job("list")
        assert code == 0, err
        return dict(line.split(None, 2)[::2] for line in out.splitlines()
                    if line.startswith("job-"))

    async def is_(self, name: str, words: str) -> bool:
        return (await self.statuses()).get(name) == words


async def snapshot(kube, platform) -> dict:
    """Every team namespace's Jobs, pods and Workloads, by name."""
    from kubernetes_asyncio import client

    batch = client.BatchV1Api(kube.api_client)
    found = {}
    for team in platform.teams:
        ns = team.namespace
        found[ns] = (sorted(j.metadata.name for j in (await batch.list_namespaced_job(ns)).items),
                     sorted(p.metadata.name for p in (await kube.core.list_namespaced_pod(ns)).items),
                     sorted(w["metadata"]["name"] for w in await kube.workloads(ns)))
    return found


async def nothing_left_of(kube, namespace: str, name: str) -> bool:
    """Job ``name`` is gone from ``namespace``: no Job, no pod of it, no Workload."""
    from kubernetes_asyncio import client

    jobs = (await client.BatchV1Api(kube.api_client).list_namespaced_job(namespace)).items
    pods = (await kube.core.list_namespaced_pod(
        namespace, label_selector=f"{JOB_NAME_LABEL}={name}")).items
    workloads = [w for w in await kube.workloads(namespace)
                 if any(o["name"] == name for o in w["metadata"].get("ownerReferences", []))]
    return name not in {j.metadata.name for j in jobs} and not pods and not workloads


async def send(method: str, url: str, token: str | None, body=None) -> tuple[int, dict]:
    """One request with ``token`` (or none), as any client could send it."""
    headers = {"Authorization": f"token {token}"} if token else {}
    async with aiohttp.ClientSession() as http:
        async with http.request(method, url, json=body, headers=headers,
                                allow_redirects=False) as r:
            text = await r.text()
            return r.status, (json.loads(text) if text.startswith("{") else {"text": text})
