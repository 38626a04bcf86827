"""Resume GPU spawns that were queued or starting when the hub went down.

JupyterHub forgets a spawn that had not finished when it stopped; the notebook pod,
and its Kueue Workload's place in the queue, stay. This hub service runs once after
each hub start: for every GPUSpawner pod that is still waiting or starting and whose
user's server the hub no longer knows, it asks the hub to start that server again
with the same profile. GPUSpawner then adopts the pod (same Workload, same place).

Run by :func:`jupyterhub_gpu.configure_hub` as the managed service ``gpu-resume``,
with the scopes ``list:users``, ``read:servers`` and ``servers``: its hub token (the
one JupyterHub makes for a managed service at each hub start) may start any user's
server and does not expire, so once its pass is done the service replaces itself
with a process that only sleeps and holds neither the token nor any other variable
(:func:`idle`). It reads pods with
the hub's Kubernetes credentials: in the hub pod, the in-cluster config (the hub
passes it :data:`jupyterhub_gpu.contract.KUBE_ENV`), else ``KUBECONFIG``.

A server the hub refuses to start (HTTP 4xx: the user was deleted, or may no longer
use the profile) is logged and skipped; the others are still resumed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from dataclasses import dataclass
from urllib.parse import quote

from ..contract import ENV_API_TOKEN, ENV_API_URL, PROFILE_LABEL, SERVERNAME_KEY, USERNAME_KEY
from ..logtext import shown
from ..spec.parse import load_platform

#: this module, as the hub runs it (python -m) and as its idle process names itself
MODULE = "jupyterhub_gpu.hub.resume"
log = logging.getLogger(MODULE)
# GPUSpawner's pods, whatever component label the spawner is configured with
SELECTOR = PROFILE_LABEL
#: what the service runs once its pass is done: sleep until stopped (SIGTERM)
IDLE = "import signal; signal.pause()"


@dataclass(frozen=True)
class Resumable:
    user: str
    server: str
    profile: str


def resumable(pods: list[dict], hub_users: list[dict]) -> list[Resumable]:
    """Pods still waiting or starting whose server the hub does not know (pure)."""
    known = {(u["name"], name) for u in hub_users
             for name, s in (u.get("servers") or {}).items()
             if s.get("ready") or s.get("pending")}
    found = []
    for pod in pods:
        meta = pod["metadata"]
        note = meta.get("annotations") or {}
        key = (note.get(USERNAME_KEY), note.get(SERVERNAME_KEY, ""))
        if (meta.get("deletionTimestamp") or pod.get("status", {}).get("phase") != "Pending"
                or not key[0] or key in known):
            continue
        found.append(Resumable(key[0], key[1], meta["labels"][PROFILE_LABEL]))
    return found


class HubError(RuntimeError):
    """The hub answered a request with an HTTP error."""

    def __init__(self, method: str, path: str, status: int, text: str):
        super().__init__(f"{method} {path}: HTTP {status}: {text}")
        self.status = status


async def _hub(http, method: str, path: str, body: dict | None = None) -> dict | None:
    url = os.environ[ENV_API_URL].rstrip("/") + path
    headers = {"Authorization": f"token {os.environ[ENV_API_TOKEN]}"}
    async with http.request(method, url, headers=headers, json=body) as r:
        if r.status >= 400:
            raise HubError(method, path, r.status, await r.text())
        text = await r.text()
        return json.loads(text) if text else None


async def _hub_users(http) -> list[dict]:
    users, offset = [], 0
    while True:  # paginated reads
        page = await _hub(http, "GET", f"/users?state=active&offset={offset}&limit=200",
                          None)
        items = page["items"] if isinstance(page, dict) else page
        users += items
        if not isinstance(page, dict) or not page.get("_pagination", {}).get("next"):
            return users
        offset += len(items)


async def _pods(namespaces: list[str]) -> list[dict]:
    from kubernetes_asyncio import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        await config.load_kube_config()
    async with client.ApiClient() as api:
        core = client.CoreV1Api(api)
        found = []
        for ns in namespaces:
            listing = await core.list_namespaced_pod(ns, label_selector=SELECTOR)
            found += api.sanitize_for_serialization(listing)["items"]
        return found


def server_path(item: Resumable) -> str:
    """The hub API's path of ``item``'s server, each name one path segment."""
    return f"/users/{quote(item.user, safe='')}/servers/{quote(item.server, safe='')}"


async def _resume(http, item: Resumable) -> bool:
    """Ask the hub to start ``item`` again; False if it refuses (HTTP 4xx)."""
    path = server_path(item)
    log.info("resuming %s's queued server '%s' (profile %s)", shown(item.user),
             shown(item.server), shown(item.profile))
    try:
        await _hub(http, "POST", path, {"profile": item.profile})
    except HubError as e:
        if not 400 <= e.status < 500:
            raise
        log.warning("not resuming %s's server '%s': the hub refused it: %s", shown(item.user),
                    shown(item.server), shown(e))
        return False
    return True


async def resume_once(namespaces: list[str]) -> list[Resumable]:
    """Resume every resumable server; return those the hub accepted.

    A refusal (4xx) skips that server only. Any other failure is raised after the
    rest were tried, so that the caller retries (servers resumed meanwhile are then
    known to the hub and not asked for again).
    """
    import aiohttp

    pods = await _pods(namespaces)
    resumed, failed = [], []
    async with aiohttp.ClientSession() as http:
        for item in resumable(pods, await _hub_users(http)):
            try:
                if await _resume(http, item):
                    resumed.append(item)
            except Exception as e:  # noqa: BLE001 - raised below, after the others
                log.warning("could not resume %s's server '%s': %s", shown(item.user),
                            shown(item.server), shown(e))
                failed.append(item)
    if failed:
        raise RuntimeError(f"{len(failed)} server(s) not resumed yet; "
                           f"{len(resumed)} resumed")
    return resumed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="the platform spec (YAML)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s %(name)s] %(message)s")
    namespaces = sorted({t.namespace for t in load_platform(args.spec).teams})
    for attempt in range(30):  # the hub API may still be starting
        try:
            resumed = asyncio.run(resume_once(namespaces))
            break
        except Exception as e:  # noqa: BLE001 - retried, then reported
            log.warning("resume attempt %d failed: %s", attempt + 1, e)
            asyncio.run(asyncio.sleep(2))
    else:
        raise SystemExit("could not resume queued servers; see the warnings above")
    log.info("resumed %d queued server(s); nothing more to do: idling without the "
             "hub token", len(resumed))
    idle()


def idle() -> None:
    """Stay up (JupyterHub restarts a managed service that exits), as a process that no
    longer holds the service's hub token: this process is replaced by one that only
    sleeps, with an empty environment. The token may start any user's server
    (``servers``) and does not expire; after the one pass it has no use here."""
    sys.stdout.flush()
    sys.stderr.flush()
    # named in its command line (ps, /proc/<pid>/cmdline) as what it is
    os.execve(sys.executable, [sys.executable, "-c", IDLE, f"{MODULE} (idle)"], {})


if __name__ == "__main__":
    main()
