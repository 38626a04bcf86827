"""What the gpu-kernels service reads and changes in the cluster, with the hub's
credentials.

Reads come from the shared watches of every team namespace
(:mod:`jupyterhub_gpu.watches.teams`): the users' notebook pods (a kernel belongs to
one of its user's running servers) and the GPU kernels' pods (what the per-user cap
counts), Kueue's Workloads, and the pods' events (a starting kernel's words, as a
spawn's). No request lists anything from the API server.
Writes are a kernel's pod, then its two NetworkPolicies owned by the pod (the garbage
collector deletes them with it), the pod's deletion, and for a fallback profile's
kernel the pool Kueue admitted it to, recorded on its pod as the hub records a
server's (:mod:`jupyterhub_gpu.kueue.poolgate`, :func:`record_pools`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Iterable

from kubespawner.clients import shared_client

from ..builders.pod import pool_annotations
from ..contract import (KERNEL_COMPONENT, KERNEL_ID_LABEL, KERNEL_RESPONSE_FLAG,
                        KERNEL_SERVER_LABEL, POOL_GATE,
                        PROFILE_LABEL, SERVERNAME_KEY, SINGLEUSER_COMPONENT, USERNAME_KEY)
from ..kueue import status as st
from ..kueue.poolgate import record_pool
from ..spec.grant import Grant
from ..spec.model import Platform
from ..watches.teams import TeamWatches, component, owner, uid_key
from .request import KernelRefused

log = logging.getLogger("jupyterhub_gpu.kernels")
#: how long a new kernel pod may take to reach the watch before its creator goes on
SEEN_TIMEOUT = 10.0
#: the phases of a pod whose kernel has ended
ENDED = ("Succeeded", "Failed")


def _labels(pod: dict) -> dict:
    return pod["metadata"].get("labels") or {}


def response_host(pod: dict) -> str:
    """The address a kernel pod answers to: its server's (its launcher's command)."""
    command = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("command") or []
    if KERNEL_RESPONSE_FLAG in command[:-1]:
        return command[command.index(KERNEL_RESPONSE_FLAG) + 1].rpartition(":")[0].strip("[]")
    return ""


def kernel_id(pod: dict) -> str:
    return (pod["metadata"].get("labels") or {}).get(KERNEL_ID_LABEL, "")


def active(pod: dict) -> bool:
    """Queued, starting or running: neither ended nor being deleted."""
    return ((pod.get("status") or {}).get("phase") not in ENDED
            and not pod["metadata"].get("deletionTimestamp"))


class Watches(TeamWatches):
    """The service's watches of every team namespace, and what it reads from them."""

    events_watched = True  # a starting kernel's words (kernels.progress) read them

    def __init__(self, namespaces: Iterable[str]):
        super().__init__(namespaces, log)

    def kernel_pods(self) -> list[dict]:
        """Every kernel pod in the watches."""
        return [p for r in self.pods.values() for p in r.resources.values()
                if component(p) == KERNEL_COMPONENT]
    def workloads_in(self, namespace: str) -> list[dict]:
        """Kueue's Workloads in ``namespace`` (none outside the team namespaces)."""
        found = self.workloads.get(namespace)
        return list(found.resources.values()) if found is not None else []

    def kernels_of(self, user: str) -> list[dict]:
        """The user's kernel pods, oldest first."""
        found = [p for p in self.kernel_pods() if owner(p) == user]
        return sorted(found, key=lambda p: (p["metadata"].get("creationTimestamp") or "",
                                            p["metadata"]["name"]))

    def kernel(self, user: str, kid: str) -> dict | None:
        """The user's kernel of id ``kid``, if they have it."""
        return next((p for p in self.kernels_of(user) if kernel_id(p) == kid), None)

    def running_servers(self, user: str) -> list[dict]:
        """The user's running notebook pods that have an address."""
        return [p for p in self.notebooks_of(user)
                if (p.get("status") or {}).get("phase") == "Running"
                and (p.get("status") or {}).get("podIP")
                and not p["metadata"].get("deletionTimestamp")]

    def orphans(self) -> list[dict]:
        """Kernel pods, not being deleted, whose server is gone: no live notebook pod
        of their owner's user and server name at the address they answer to (the
        server was stopped or culled without shutting its kernels down, or runs again
        in a new pod, whose kernel manager does not know them). None until every watch
        has listed."""
        if not self.ready:
            return []
        found = []
        for reflector in self.pods.values():
            pods = [p for p in reflector.resources.values()
                    if not p["metadata"].get("deletionTimestamp")]
            servers = {(_labels(p).get(USERNAME_KEY), _labels(p).get(SERVERNAME_KEY, ""),
                        (p.get("status") or {}).get("podIP"))
                       for p in pods if component(p) == SINGLEUSER_COMPONENT}
            found += [p for p in pods if component(p) == KERNEL_COMPONENT
                      and (_labels(p).get(USERNAME_KEY), _labels(p).get(KERNEL_SERVER_LABEL, ""),
                           response_host(p)) not in servers]
        return found

    def gated_kernels(self) -> list[dict]:
        """Every kernel pod our pool gate still holds (a fallback profile's)."""
        return [p for p in self.kernel_pods() if active(p)
                and any(g.get("name") == POOL_GATE
                        for g in (p.get("spec") or {}).get("schedulingGates") or [])]

    def workload_of(self, pod: dict) -> dict | None:
        """A kernel pod's Workload, live or just deleted (by the pod's uid: its job uid)."""
        meta = pod["metadata"]
        return self.workloads[meta["namespace"]].of_job(meta.get("uid"), buried=True)

    def buried_kernel(self, uid: str) -> dict | None:
        """The last state of the kernel pod of ``uid``, deleted lately, if a watch still
        remembers it (:class:`jupyterhub_gpu.watches.indexed.Graveyard`)."""
        return next((pod for r in self.pods.values()
                     if (pod := r.graveyard.find(uid_key(uid))) is not None
                     and component(pod) == KERNEL_COMPONENT), None)

    async def seen(self, namespace: str, name: str) -> bool:
        """Wait (briefly) until a pod just created is in the watch."""
        key = f"{namespace}/{name}"
        deadline = asyncio.get_running_loop().time() + SEEN_TIMEOUT
        while key not in self.pods[namespace].resources:
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True


async def create(pod: dict, policies: Iterable[dict],
                 undo: Callable[[dict], Awaitable[Any]] | None = None) -> dict:
    """Create the kernel's pod, then its policies, each owned by the pod. If a policy
    cannot be made, the pod is deleted again (``undo(pod)`` awaited first) and the
    error raised: a kernel its server cannot reach would only hang. A pod of that name
    already there (the watch has not shown it yet) is a :class:`KernelRefused`."""
    from kubernetes_asyncio.client import ApiException

    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    core = shared_client("CoreV1Api")
    try:
        created = core.api_client.sanitize_for_serialization(
            await core.create_namespaced_pod(ns, pod))
    except ApiException as e:
        if e.status != 409:
            raise
        raise KernelRefused(f"You already have kernel {kernel_id(pod)}.",
                            f"pod {ns}/{name} exists", status=409) from None
    owner_ref = [{"apiVersion": "v1", "kind": "Pod", "name": name,
                  "uid": created["metadata"]["uid"], "blockOwnerDeletion": False}]
    try:
        for policy in policies:
            policy["metadata"]["ownerReferences"] = owner_ref
            await shared_client("NetworkingV1Api").create_namespaced_network_policy(ns, policy)
    except Exception:
        if undo is not None:
            await undo(created)
        await core.delete_namespaced_pod(name, ns)
        raise
    return created


async def delete(pod: dict) -> None:
    """Delete the kernel's pod (its policies follow it: the garbage collector)."""
    from kubernetes_asyncio.client import ApiException

    meta = pod["metadata"]
    try:
        await shared_client("CoreV1Api").delete_namespaced_pod(meta["name"], meta["namespace"])
    except ApiException as e:
        if e.status != 404:
            raise


async def delete_orphans(watches: Watches,
                         first: Callable[[dict], Awaitable[Any]] | None = None) -> list[str]:
    """Delete every kernel pod whose server is gone (:meth:`Watches.orphans`): a GPU
    held for no one; ``first(pod)`` is awaited before each deletion (the usage
    ledger's record). The pods deleted, as ``namespace/name``."""
    done = []
    for pod in watches.orphans():
        meta = pod["metadata"]
        if first is not None:
            await first(pod)
        await delete(pod)
        log.info("Deleted kernel %s/%s: its server is gone", meta["namespace"], meta["name"])
        done.append(f"{meta['namespace']}/{meta['name']}")
    return done


async def record_pools(watches: Watches, platform: Platform) -> list[str]:
    """One pass over the kernel pods our pool gate holds: for each whose Workload Kueue
    admitted, record the pool on the pod and lift the gate, as the hub does for a
    server (:func:`jupyterhub_gpu.kueue.poolgate.record_pool`). A patch the API refuses
    because the gates moved, or a pod gone, waits for the next pass. The pods
    patched, as ``namespace/name``."""
    from kubernetes_asyncio.client import ApiException

    teams = {t.namespace: t for t in platform.teams}
    done = []
    for pod in watches.gated_kernels():
        meta = pod["metadata"]
        profile = platform.profile((meta.get("labels") or {}).get(PROFILE_LABEL, ""))
        team = teams.get(meta["namespace"])
        if profile is None or team is None:  # the spec changed under it: nothing to record
            continue
        workload = st.workload_for(pod, watches.workloads[meta["namespace"]].resources.values())
        try:
            pool = await record_pool(shared_client("CoreV1Api"), pod, workload,
                                     pool_annotations(Grant.of(platform, profile, team)))
        except ApiException as e:
            if e.status not in (404, 409, 422):
                raise
            continue
        if pool is not None:
            log.info("Kernel %s/%s was admitted to pool %s", meta["namespace"], meta["name"],
                     pool)
            done.append(f"{meta['namespace']}/{meta['name']}")
    return done
