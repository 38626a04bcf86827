"""Item 4: P pods and P Workloads in a watched namespace, made directly by the admin
(no scheduling: each pod carries a scheduling gate, each Workload is inactive), for
the hubs' shared watches to hold. They carry KubeSpawner's component label, so the
hubs' pod watches (selected by it) see them all.

``python -m benchmarks.memory [--pods 5000]``: this benchmark alone, on a dev cluster
of its own (ports shifted by ``JUPYTERHUB_GPU_TEST_PORT_OFFSET``), printing each hub's
RSS and the ratio; it writes no report."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from jupyterhub_gpu.builders.pod import RESTRICTED_CONTAINER, RESTRICTED_POD
from jupyterhub_gpu.contract import COMPONENT_LABEL, SINGLEUSER_COMPONENT

NAMESPACE = "jhub-data-science"
BENCH_LABEL = "jupyterhub-gpu-bench"  # every object made here, for the clean-up
KUEUE = ("kueue.x-k8s.io", "v1beta2")


def pod(i: int) -> dict:
    return {"metadata": {"name": f"bench-pod-{i:05d}",
                         "labels": {COMPONENT_LABEL: SINGLEUSER_COMPONENT, BENCH_LABEL: "1",
                                    "hub.jupyter.org/username": f"bench-{i:05d}"},
                         "annotations": {"hub.jupyter.org/username": f"bench-{i:05d}"}},
            # as a notebook pod must be under the team namespaces' Pod Security level
            "spec": {"schedulingGates": [{"name": "jupyterhub-gpu.bench/never"}],
                     "securityContext": {**RESTRICTED_POD, "runAsUser": 1000},
                     "containers": [{"name": "notebook", "image": "bench:none",
                                     "securityContext": dict(RESTRICTED_CONTAINER),
                                     "resources": {"requests": {"cpu": "100m"}}}]}}


def workload(i: int) -> dict:
    return {"apiVersion": "/".join(KUEUE), "kind": "Workload",
            "metadata": {"name": f"bench-wl-{i:05d}", "labels": {BENCH_LABEL: "1"}},
            "spec": {"active": False, "queueName": "data-science",
                     "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                         "containers": [{"name": "notebook", "image": "bench:none",
                                         "resources": {"requests": {"cpu": "100m"}}}]}}}]}}


async def _each(make, n: int, concurrency: int = 16) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(i):
        async with gate:
            await make(i)

    await asyncio.gather(*(one(i) for i in range(n)))


async def populate(kubeconfig: Path, n: int) -> None:
    from kubernetes_asyncio import client, config

    api = await config.new_client_from_config(config_file=str(kubeconfig))
    try:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        await _each(lambda i: core.create_namespaced_pod(NAMESPACE, pod(i)), n)
        await _each(lambda i: custom.create_namespaced_custom_object(
            *KUEUE, NAMESPACE, "workloads", workload(i)), n)
    finally:
        await api.close()


async def clean(kubeconfig: Path) -> None:
    from kubernetes_asyncio import client, config

    api = await config.new_client_from_config(config_file=str(kubeconfig))
    try:
        await client.CoreV1Api(api).delete_collection_namespaced_pod(
            NAMESPACE, label_selector=BENCH_LABEL, grace_period_seconds=0)
        await client.CustomObjectsApi(api).delete_collection_namespaced_custom_object(
            *KUEUE, NAMESPACE, "workloads", label_selector=BENCH_LABEL)
    finally:
        await api.close()


async def alone(pods: int, offset: int, settle: float, idle: float
                ) -> dict[str, tuple[float, float]]:
    """Each hub's (RSS MiB, CPU s/min at idle) with ``pods`` pods and Workloads, as
    ``make bench`` measures them, on a dev cluster of its own."""
    from .devcluster import dev_cluster, write_bench_spec
    from .hubs import Ports, ok_server
    from .spawns import watch_memory

    work = Path(tempfile.mkdtemp(prefix="jupyterhub-gpu-memory-"))
    print(f"memory: working in {work}", flush=True)
    spec, ports = write_bench_spec(work, room=10), Ports.shifted(offset)
    with dev_cluster(spec, work / "cluster", offset) as (status, kubeconfig), \
            ok_server(ports.ok):
        await populate(Path(status["kubeconfig"]), pods)
        return {mode: await watch_memory(mode, spec, kubeconfig, work, ports, settle, idle)
                for mode in ("kube", "gpu")}


def main(argv=None) -> int:
    from tests.integration.ports import ENV_OFFSET

    p = argparse.ArgumentParser(prog="python -m benchmarks.memory",
                                description=__doc__.split("\n")[0])
    p.add_argument("--pods", type=int, default=5000, help="pods and Workloads (5000)")
    p.add_argument("--settle", type=float, default=2.0,
                   help="seconds between the RSS samples that must agree (2)")
    p.add_argument("--idle", type=float, default=15.0, help="seconds of idle CPU measured (15)")
    args = p.parse_args(argv)
    found = asyncio.run(alone(args.pods, int(os.environ.get(ENV_OFFSET, "0")), args.settle,
                              args.idle))
    for mode, (rss, cpu) in found.items():
        print(f"memory: {mode} hub RSS {rss:.0f} MiB, CPU at idle {cpu:.2f} s/min", flush=True)
    print(f"memory: RSS ratio gpu/kube {found['gpu'][0] / found['kube'][0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
