"""The model of Kueue's admission that the unit tier takes its verdicts from
(tests/kueue_admission.py) held to the real Kueue (sigs.k8s.io/kueue v0.17.0, the dev
cluster's; ``pkg/scheduler/flavorassigner/flavorassigner.go`` and
``pkg/podset/podset.go``) on the same inputs: the case table tests/kueue_cases.py.

For each case and each ResourceFlavor F of its spec (the bundle's flavors, renamed to
stand beside the cluster's own): a ClusterQueue shaped as the bundle builds the team's
(``builders/kueue.cluster_queue``: one resource group, every flavor in the bundle's
order, so the same label keys count), outside any cohort and with quota on F alone; its
LocalQueue; and the case's pod, in a namespace Kueue manages, naming a scheduler that
does not run (so no scheduler marks it unschedulable and Karpenter starts no node for
it). The real Kueue admits the pod to F exactly when the model says it may
(``may_admit``), and the pod it ungates carries the nodeSelector and tolerations of the
model's merge (``admit``). Every case in one setup: a few dozen pods, no node.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
from kubernetes_asyncio.client import ApiException

from jupyterhub_gpu.builders import kueue
from jupyterhub_gpu.bundle.kueueconfig import kueue_configuration
from jupyterhub_gpu.contract import ADMISSION_GATE

from .. import kueue_admission
from ..kueue_cases import CASES, REPO, Case, flavors, model_verdict
from .conftest import KUEUE, wait_for

NAMESPACE = "kueue-model-check"
PREFIX = "km"
NO_SCHEDULER = "kueue-model-check-none"  # no scheduler serves it: the pods stay unbound
AMPLE = {"cpu": "1000", "memory": "100Ti"}  # and 1000 of every GPU resource
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# added to every pod by the API server's DefaultTolerationSeconds admission plugin
DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _flavor_name(case: Case, pool: str) -> str:
    return f"{PREFIX}-{'nap' if case.nap else 'example'}-{pool}"


def _queue_name(case: Case, pool: str) -> str:
    return f"{PREFIX}-{case.id}-{pool}"


def _cluster_queue(case: Case, platform, pod: dict, pool: str) -> dict:
    """The team's ClusterQueue as the bundle builds it, renamed, in no cohort (so no
    quota is borrowed), the default preemption, and quota on ``pool``'s flavor only."""
    (team,) = [t for t in platform.teams if t.namespace == pod["metadata"]["namespace"]]
    queue = copy.deepcopy(kueue.cluster_queue(platform, team))
    spec = queue["spec"]
    for key in ("cohortName", "preemption"):
        spec.pop(key, None)
    spec["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    for group in spec["resourceGroups"]:
        for flavor in group["flavors"]:
            ours = flavor["name"] == pool
            flavor["name"] = _flavor_name(case, flavor["name"])
            flavor["resources"] = [{"name": r["name"], "nominalQuota": (
                AMPLE.get(r["name"], "1000") if ours else "0")} for r in flavor["resources"]]
    queue["metadata"] = {"name": _queue_name(case, pool)}
    return queue


def _checked_pod(case: Case, pod: dict, pool: str) -> dict:
    checked = copy.deepcopy(pod)
    name = _queue_name(case, pool)
    checked["metadata"].update(name=name, namespace=NAMESPACE)
    checked["metadata"]["labels"][QUEUE_LABEL] = name
    checked["spec"]["schedulerName"] = NO_SCHEDULER
    return checked


async def _has_default_account(kube) -> bool:
    accounts = await kube.core.list_namespaced_service_account(NAMESPACE)
    return any(a.metadata.name == "default" for a in accounts.items)


def _rendered(directory) -> dict[str, dict]:
    """Every case's pod, rendered in a process of its own with no KUBECONFIG
    (tests/kueue_cases.py says why)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-m", "tests.kueue_cases", str(directory)],
                         capture_output=True, text=True, env=env, cwd=REPO, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == kind), None)


def _tolerations(pod: dict) -> list[dict]:
    return sorted((t for t in pod["spec"].get("tolerations") or []
                   if t.get("key") not in DEFAULT_TOLERATIONS), key=repr)


@pytest.fixture
async def checked(kube, cluster_platform, tmp_path):
    """Creates every case's Kueue objects and pods; yields {(case, pool): the pod as
    rendered}, {case: platform}; deletes all it made at the end."""
    pods, platforms = {}, {}
    created: list[tuple] = []  # (kind, name) of cluster-scoped objects, in creation order

    async def create_cluster(plural: str, body: dict):
        await kube.custom.create_cluster_custom_object(*KUEUE, plural, body)
        created.append((plural, body["metadata"]["name"]))

    labels = kueue_configuration(cluster_platform)["managedJobsNamespaceSelector"]["matchLabels"]
    await kube.core.create_namespace({"metadata": {"name": NAMESPACE, "labels": labels}})
    try:
        made_flavors, rendered = set(), _rendered(tmp_path)
        for case in CASES:
            platform = platforms[case] = case.platform(tmp_path)
            pod = rendered[case.id]
            for flavor in flavors(platform):
                pool = flavor["metadata"]["name"]
                if _flavor_name(case, pool) not in made_flavors:
                    made_flavors.add(_flavor_name(case, pool))
                    await create_cluster("resourceflavors", {
                        **flavor, "metadata": {"name": _flavor_name(case, pool)}})
                pods[case, pool] = pod
        for case, pool in pods:
            await create_cluster("clusterqueues", _cluster_queue(
                case, platforms[case], pods[case, pool], pool))
            await kube.custom.create_namespaced_custom_object(
                *KUEUE, NAMESPACE, "localqueues", {
                    "apiVersion": f"{KUEUE[0]}/{KUEUE[1]}", "kind": "LocalQueue",
                    "metadata": {"name": _queue_name(case, pool)},
                    "spec": {"clusterQueue": _queue_name(case, pool)}})

        async def all_active():
            listing = await kube.custom.list_cluster_custom_object(*KUEUE, "clusterqueues")
            active = {q["metadata"]["name"] for q in listing["items"]
                      if (_condition(q, "Active") or {}).get("status") == "True"}
            return active >= {_queue_name(c, p) for c, p in pods}
        await wait_for(all_active, timeout=60, what="the ClusterQueues to be active")
        await wait_for(lambda: _has_default_account(kube), what="the namespace's account")
        for (case, pool), pod in pods.items():
            await kube.core.create_namespaced_pod(NAMESPACE, _checked_pod(case, pod, pool))
        yield pods, platforms
    finally:
        await kube.core.delete_namespace(NAMESPACE, grace_period_seconds=0)
        for plural, name in reversed(created):
            try:
                await kube.custom.delete_cluster_custom_object(*KUEUE, plural, name)
            except ApiException as e:
                if e.status != 404:
                    raise


async def _verdicts(kube, pods) -> dict:
    """{(case, pool): the Workload} once Kueue decided on every pod: admitted, or no
    flavor could be assigned."""
    names = {_queue_name(c, p): (c, p) for c, p in pods}

    async def decided():
        uids = {p.metadata.uid: names[p.metadata.name]
                for p in (await kube.core.list_namespaced_pod(NAMESPACE)).items}
        found = {}
        for workload in await kube.workloads(NAMESPACE):
            key = uids.get(workload["metadata"].get("labels", {}).get("kueue.x-k8s.io/job-uid"))
            admitted = _condition(workload, "Admitted")
            reserved = _condition(workload, "QuotaReserved")
            if key and ((admitted or {}).get("status") == "True" or (
                    reserved and reserved["status"] == "False"
                    and "couldn't assign flavors" in reserved["message"])):
                found[key] = workload
        return found if len(found) == len(pods) else None
    return await wait_for(decided, timeout=120, what="Kueue to decide on every pod")


async def test_the_real_kueue_gives_the_model_verdicts(kube, checked):
    pods, platforms = checked
    workloads = await _verdicts(kube, pods)
    for case, platform in platforms.items():
        pools = [f["metadata"]["name"] for f in flavors(platform)]
        admitted = [p for p in pools
                    if (_condition(workloads[case, p], "Admitted") or {}).get("status") == "True"]
        assert admitted == model_verdict(pods[case, pools[0]], platform), case.id
        for pool in admitted:
            (assignment,) = workloads[case, pool]["status"]["admission"]["podSetAssignments"]
            assert set(assignment["flavors"].values()) == {_flavor_name(case, pool)}

            async def ungated():
                pod = await kube.core.read_namespaced_pod(_queue_name(case, pool), NAMESPACE)
                gates = [g.name for g in pod.spec.scheduling_gates or []]
                return None if ADMISSION_GATE in gates else kube.api_client.\
                    sanitize_for_serialization(pod)
            real = await wait_for(ungated, what=f"Kueue to ungate {case.id} on {pool}")
            (flavor,) = [f for f in flavors(platform) if f["metadata"]["name"] == pool]
            model = kueue_admission.admit(pods[case, pool], flavor)
            assert real["spec"].get("nodeSelector") == (model["spec"]["nodeSelector"] or None), (
                case.id, pool)
            assert _tolerations(real) == _tolerations(model), (case.id, pool)
