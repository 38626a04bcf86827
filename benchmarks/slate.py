"""A clean namespace and node state before each round of the interleaved benchmarks:
what the previous round's hub left (notebook pods, Workloads, events) deleted in every
team namespace, Karpenter's NodeClaims deleted, and a wait until no node Karpenter
made is left, so that neither hub starts on the other's nodes or events."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Iterable

from jupyterhub_gpu.contract import KARPENTER_GROUP, NODEPOOL_LABEL

from .memory import KUEUE

KARPENTER = (KARPENTER_GROUP, "v1")


async def _remaining(core, custom, namespaces: Iterable[str]) -> list[str]:
    left = []
    for ns in namespaces:
        pods = (await core.list_namespaced_pod(ns)).items
        workloads = (await custom.list_namespaced_custom_object(
            *KUEUE, ns, "workloads"))["items"]
        if pods or workloads:
            left.append(f"{ns}: {len(pods)} pods, {len(workloads)} Workloads")
    claims = (await custom.list_cluster_custom_object(*KARPENTER, "nodeclaims"))["items"]
    nodes = (await core.list_node(label_selector=NODEPOOL_LABEL)).items
    if claims or nodes:
        left.append(f"{len(claims)} NodeClaims, {len(nodes)} nodes")
    return left


async def clean(kubeconfig: Path, namespaces: Iterable[str], timeout: float = 300) -> float:
    """Delete and wait until gone; the seconds it took. ``kubeconfig``: the admin's."""
    from kubernetes_asyncio import client, config

    namespaces = list(namespaces)
    started = time.monotonic()
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    try:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for ns in namespaces:
            await core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            await custom.delete_collection_namespaced_custom_object(*KUEUE, ns, "workloads")
            await core.delete_collection_namespaced_event(ns)
        await custom.delete_collection_cluster_custom_object(*KARPENTER, "nodeclaims")
        while left := await _remaining(core, custom, namespaces):
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"not clean after {timeout:.0f}s: {'; '.join(left)}")
            await asyncio.sleep(1)
    finally:
        await api.close()
    return time.monotonic() - started
