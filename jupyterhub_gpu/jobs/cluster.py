"""What the jobs service reads and changes in the cluster, with the hub's credentials.

Reads come from shared watches, started once for every team namespace
(:mod:`jupyterhub_gpu.watches.teams`): the users' Jobs, the pods of those Jobs and the
users' notebook pods (a job takes its image and home from the running server), and
Kueue's Workloads. No request lists anything from the API server. Writes are the Job (and a
multi-pod job's headless Service and NetworkPolicy, owned by the Job so that they go
with it) and the Job's deletion with its dependants (its pods and its Workload, which
Kueue owns to the Job).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, AsyncIterator, Iterable

from kubespawner.clients import shared_client

from ..contract import BATCH_API_VERSION, JOB_NAME_LABEL, JOB_UID_LABEL, SERVERNAME_KEY
from ..kueue import status as st
from ..kueue.visibility import PendingWorkloads
from ..watches.teams import TeamWatches, owner

log = logging.getLogger("jupyterhub_gpu.jobs")
#: how long a new Job may take to reach the watch before its creator goes on
SEEN_TIMEOUT = 10.0


def finished(job: dict) -> bool:
    return st.is_true(job, "Complete") or st.is_true(job, "Failed")


class Watches(TeamWatches):
    """The service's watches of every team namespace, and what it reads from them."""

    def __init__(self, namespaces: Iterable[str]):
        super().__init__(namespaces, log)

    def jobs_of(self, user: str) -> list[dict]:
        """The user's Jobs, oldest first."""
        found = [j for r in self.jobs.values() for j in r.resources.values() if owner(j) == user]
        return sorted(found, key=lambda j: (j["metadata"].get("creationTimestamp") or "",
                                            j["metadata"]["name"]))

    def job(self, user: str, name: str) -> dict | None:
        return next((j for j in self.jobs_of(user) if j["metadata"]["name"] == name), None)

    def active_jobs(self, user: str) -> list[dict]:
        """The user's Jobs neither finished nor being deleted: what the limit counts."""
        return [j for j in self.jobs_of(user)
                if not finished(j) and not j["metadata"].get("deletionTimestamp")]

    def words_for_own(self, user: str) -> dict[str, str]:
        """How a status names each of the user's Jobs and notebook pods, by uid."""
        words = {p["metadata"].get("uid"): "your notebook" for p in self.notebooks_of(user)}
        words.update({j["metadata"].get("uid"): f"your job {j['metadata']['name']}"
                      for j in self.jobs_of(user)})
        words.pop(None, None)
        return words

    def notebook_of(self, user: str) -> dict | None:
        """The user's running notebook pod: their default server's if it runs."""
        running = [p for p in self.notebooks_of(user)
                   if (p.get("status") or {}).get("phase") == "Running"
                   and not p["metadata"].get("deletionTimestamp")]
        running.sort(key=lambda p: bool((p["metadata"].get("annotations") or {}).get(SERVERNAME_KEY)))
        return running[0] if running else None

    def pods_of(self, job: dict) -> list[dict]:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        pods = [p for p in self.pods[ns].resources.values()
                if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == name]
        return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")

    def workload_of(self, job: dict) -> dict | None:
        uid = job["metadata"].get("uid")
        return next((w for w in self.workloads[job["metadata"]["namespace"]].resources.values()
                     if (w["metadata"].get("labels") or {}).get(JOB_UID_LABEL) == uid), None)

    def every_workload(self) -> list[dict]:
        return [w for r in self.workloads.values() for w in r.resources.values()]

    async def position(self, workload: dict) -> tuple[int, int]:
        """The Workload's place in its LocalQueue: Kueue's visibility API when served,
        else from the Workload watch."""
        ns, queue = workload["metadata"]["namespace"], workload["spec"].get("queueName", "")
        pending = PendingWorkloads.shared(ns, queue)
        try:
            await pending.refresh_if_stale(shared_client("CustomObjectsApi"))
        except Exception as e:  # noqa: BLE001 - the watch still knows the order
            log.warning("Kueue's visibility API failed (%s): queue positions from the "
                        "Workload watch", e)
        found = pending.position(workload["metadata"]["name"])
        return found or st.queue_position(workload, self.workloads[ns].resources.values())

    async def seen(self, namespace: str, name: str) -> bool:
        """Wait (briefly) until a Job just created is in the watch."""
        key = f"{namespace}/{name}"
        deadline = asyncio.get_running_loop().time() + SEEN_TIMEOUT
        while key not in self.jobs[namespace].resources:
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True


async def create(job: dict, service: dict | None, policy: dict | None = None) -> dict:
    """Create the Job, then what a multi-pod job has beside it, each owned by the Job:
    its headless Service and its pods' NetworkPolicy
    (:func:`jupyterhub_gpu.builders.job.peer_policy`). If one of those cannot be
    made, the Job is deleted again (with whatever it owns) and the error raised: a
    job whose pods cannot reach each other would only hang."""
    ns = job["metadata"]["namespace"]
    batch = shared_client("BatchV1Api")
    created = batch.api_client.sanitize_for_serialization(
        await batch.create_namespaced_job(ns, job))
    owner_ref = [{"apiVersion": BATCH_API_VERSION, "kind": "Job", "name": job["metadata"]["name"],
                  "uid": created["metadata"]["uid"], "blockOwnerDeletion": False}]
    try:
        if service is not None:
            service["metadata"]["ownerReferences"] = owner_ref
            await shared_client("CoreV1Api").create_namespaced_service(ns, service)
        if policy is not None:
            policy["metadata"]["ownerReferences"] = owner_ref
            await shared_client("NetworkingV1Api").create_namespaced_network_policy(ns, policy)
    except Exception:
        await batch.delete_namespaced_job(job["metadata"]["name"], ns,
                                          propagation_policy="Background")
        raise
    return created


async def _delete_if_there(delete: Any, name: str, ns: str) -> None:
    from kubernetes_asyncio.client import ApiException

    try:
        await delete(name, ns)
    except ApiException as e:
        if e.status != 404:
            raise


async def delete(job: dict) -> None:
    """Delete the Job and, in the background, its pods and Workload (the garbage
    collector follows their owner references); and a multi-pod job's Service and
    NetworkPolicy."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    await shared_client("BatchV1Api").delete_namespaced_job(
        name, ns, propagation_policy="Background")
    if job["spec"].get("completionMode") == "Indexed":
        await _delete_if_there(shared_client("CoreV1Api").delete_namespaced_service, name, ns)
        await _delete_if_there(
            shared_client("NetworkingV1Api").delete_namespaced_network_policy, name, ns)


class NoLogs(Exception):
    """The API server could not get the pod's log from its node (Kubernetes' words)."""


async def log_chunks(pod: dict) -> AsyncIterator[bytes]:
    """The pod's log as the kubelet serves it, followed while the pod runs; raises
    :class:`NoLogs` where the cluster serves none."""
    from kubernetes_asyncio.client import ApiException

    meta = pod["metadata"]
    try:
        response = await shared_client("CoreV1Api").read_namespaced_pod_log(
            meta["name"], meta["namespace"], follow=True, _preload_content=False)
    except ApiException as e:
        raise NoLogs(f"{e.status} {e.reason}") from None
    try:
        if response.status >= 400:
            text = (await response.read()).decode(errors="replace")
            try:
                text = json.loads(text).get("message", text)
            except ValueError:
                pass
            raise NoLogs(f"{response.status}: {text}")
        async for chunk in response.content.iter_any():
            yield chunk
    finally:
        response.release()
