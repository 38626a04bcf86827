"""A fallback profile's pod: no pool of its own until Kueue admits it, then the pool
recorded by the hub (kueue/poolgate.py) in one patch that lifts our scheduling gate;
its environment, progress messages, stop notice and metrics name the admitted pool.
(That Kueue may admit the pod to each of its pools and the nodes take it there is
tests/unit/test_fit.py; the real round trip is tests/integration/test_fallback.py.)"""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import asdict
from datetime import datetime, timezone

import pytest
from kubernetes_asyncio.client import ApiException
from prometheus_client import REGISTRY

from jupyterhub_gpu.builders.pod import pool_annotations, spawn_settings
from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.contract import (AGENTPOOL_LABEL, ADMISSION_GATE, ENV_MEMORY, ENV_MODEL,
                                     ENV_POOL, ENV_PREEMPTIBLE, NODEPOOL_LABEL,
                                     POOL_ANNOTATION, POOL_GATE)
from jupyterhub_gpu.kueue import start as start_module
from jupyterhub_gpu.kueue.lifecycle import Outcome, SpawnRefused, wanted
from jupyterhub_gpu.kueue.messages import stop_notice
from jupyterhub_gpu.kueue.poolgate import record_patch
from jupyterhub_gpu.kueue.start import GATE_FAILED, QueuedStart
from jupyterhub_gpu.spec.parse import parse_platform

from ..kueue_cases import CASES, NAP_POOL, model_verdict
from .test_fallback_spec import h100_fallback
from .test_kueue_messages import workload
from .test_kueue_start import Withdraw, until

TRAINING = "a100-training"  # pools [a100spot, a100]
ML_ENG = UserRef("max", frozenset({"ml-eng"}))


def _grant(platform, slug=TRAINING, user=ML_ENG):
    return authorize(platform, user, {"profile": slug})


def apply_patch(obj: dict, patch: list[dict]) -> dict:
    """The JSON Patch operations the pool gate uses (RFC 6902: test, remove, add),
    applied as the API server does: all or nothing."""
    doc = copy.deepcopy(obj)
    for op in patch:
        *parents, last = [p.replace("~1", "/").replace("~0", "~")
                          for p in op["path"].split("/")[1:]]
        try:
            target = doc
            for part in parents:
                target = target[int(part)] if isinstance(target, list) else target[part]
            key = int(last) if isinstance(target, list) else last
            if op["op"] == "test" and target[key] != op["value"]:
                raise KeyError(op["path"])
            if op["op"] == "remove":
                del target[key]
        except (KeyError, IndexError) as e:  # a failed test, or no such path
            raise ApiException(status=422, reason=f"Unprocessable Entity: {e}") from None
        if op["op"] == "add":
            target[key] = op["value"]
    return doc


def admitted_workload(pool: str, uid: str = "u1") -> dict:
    w = workload("w", uid=uid, reserved=True, conditions=[{"type": "Admitted",
                                                            "status": "True"}])
    w["status"]["admission"] = {"clusterQueue": "ml-eng", "podSetAssignments": [
        {"name": "main", "flavors": {"cpu": pool, "memory": pool, "nvidia.com/gpu": pool}}]}
    return w


def gated_pod(annotations=None, gates=(POOL_GATE, ADMISSION_GATE)) -> dict:
    meta = {"name": "jupyter-max", "namespace": "jhub-ml-eng", "uid": "u1"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"schedulingGates": [{"name": g} for g in gates]},
            "status": {"phase": "Pending"}}


# -- the pod -------------------------------------------------------------------------

def test_a_fallback_pod_selects_no_pool_and_waits_for_the_hub(platform):
    settings = spawn_settings(platform, _grant(platform), "alice")
    assert settings.node_selector == {} and settings.tolerations == []
    assert settings.node_affinity_required == [{"matchExpressions": [
        {"key": AGENTPOOL_LABEL, "operator": "In", "values": ["a100spot", "a100"]}]}]
    assert settings.extra_pod_config["schedulingGates"] == [{"name": POOL_GATE}]
    env = settings.environment
    for var, annotation in ((ENV_POOL, POOL_ANNOTATION), (ENV_MODEL, "jupyterhub-gpu/gpu-model"),
                            (ENV_MEMORY, "jupyterhub-gpu/gpu-memory"),
                            (ENV_PREEMPTIBLE, "jupyterhub-gpu/preemptible")):
        assert env[var] == {"valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{annotation}']"}}}, var


def test_a_single_pool_pod_keeps_its_selector_and_tolerations(platform):
    settings = spawn_settings(platform, _grant(platform, "a100-spot"), "alice")
    assert settings.node_selector == {AGENTPOOL_LABEL: "a100spot"}
    assert {t["key"] for t in settings.tolerations} == {
        "nvidia.com/gpu", "kubernetes.azure.com/scalesetpriority"}
    assert settings.node_affinity_required == []
    assert "schedulingGates" not in settings.extra_pod_config
    assert settings.environment[ENV_POOL] == "a100spot"


def test_each_pool_gets_its_own_facts(example_spec):
    """Spot then on demand: only the spot pool is preemptible (the profile's priority is
    not); A100 then H100: each pool's GPU model."""
    platform = parse_platform(h100_fallback(example_spec))
    assert pool_annotations(_grant(platform)) == {
        "a100spot": {POOL_ANNOTATION: "a100spot", "jupyterhub-gpu/gpu-model": "A100-80GB",
                     "jupyterhub-gpu/gpu-memory": "80GB", "jupyterhub-gpu/preemptible": "true"},
        "a100": {POOL_ANNOTATION: "a100", "jupyterhub-gpu/gpu-model": "A100-80GB",
                 "jupyterhub-gpu/gpu-memory": "80GB", "jupyterhub-gpu/preemptible": "false"}}
    mig = pool_annotations(authorize(platform, UserRef("dee", frozenset({"data-science"})),
                                     {"profile": "a100-mig-3g"}))
    assert {p: facts["jupyterhub-gpu/gpu-model"] for p, facts in mig.items()} == {
        "a100mig": "A100-80GB", "h100mig": "H100-80GB"}


async def test_pools_of_both_autoscalers_are_ored(tmp_path):
    """a100spot on Node Auto Provisioning (karpenter.sh/nodepool), a100 an AKS node pool
    (kubernetes.azure.com/agentpool): one term each, so either pool will do (the NAP
    case of tests/kueue_cases.py, whose verdict the real Kueue is held to in
    tests/integration/test_kueue_model.py)."""
    (case,) = [c for c in CASES if c.nap]
    assert (case.slug, case.user, case.group, NAP_POOL) == (TRAINING, ML_ENG.name, "ml-eng",
                                                            "a100spot")
    pod = await case.pod(tmp_path)
    affinity = pod["spec"]["affinity"]["nodeAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": NODEPOOL_LABEL, "operator": "In", "values": ["a100spot"]}]},
        {"matchExpressions": [{"key": AGENTPOOL_LABEL, "operator": "In", "values": ["a100"]}]}]
    assert model_verdict(pod, case.platform(tmp_path)) == ["a100spot", "a100"]


# -- the pool gate ---------------------------------------------------------------------

def test_nothing_is_patched_before_admission_or_without_our_gate(platform):
    facts = pool_annotations(_grant(platform))
    quota_only = admitted_workload("a100")
    quota_only["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True"}]
    assert record_patch(gated_pod({}), quota_only, facts) is None  # not Admitted yet
    assert record_patch(gated_pod({}), workload("w", reserved=False), facts) is None
    assert record_patch(gated_pod({}, gates=(ADMISSION_GATE,)), admitted_workload("a100"),
                        facts) is None  # a single-pool profile's pod, or done already


@pytest.mark.parametrize("annotations", [None, {}, {"hub.jupyter.org/username": "max"}])
def test_the_patch_records_the_admitted_pool_and_lifts_only_our_gate(platform, annotations):
    pod = gated_pod(annotations)
    patch = record_patch(pod, admitted_workload("a100"), pool_annotations(_grant(platform)))
    after = apply_patch(pod, patch)
    assert after["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]  # Kueue's stays
    assert after["metadata"]["annotations"] == {
        **(annotations or {}), POOL_ANNOTATION: "a100", "jupyterhub-gpu/gpu-model": "A100-80GB",
        "jupyterhub-gpu/gpu-memory": "80GB", "jupyterhub-gpu/preemptible": "false"}


def test_the_patch_is_refused_once_the_gates_moved(platform):
    """Built while Kueue's gate stood before ours; Kueue lifted its own meanwhile."""
    pod = gated_pod({}, gates=(ADMISSION_GATE, POOL_GATE))
    patch = record_patch(pod, admitted_workload("a100"), pool_annotations(_grant(platform)))
    moved = gated_pod({}, gates=(POOL_GATE,))
    with pytest.raises(ApiException) as info:
        apply_patch(moved, patch)
    assert info.value.status == 422
    again = apply_patch(moved, record_patch(moved, admitted_workload("a100"),
                                            pool_annotations(_grant(platform))))
    assert again["spec"]["schedulingGates"] == []


# -- the spawn ---------------------------------------------------------------------------

class FakeCore:
    """CoreV1Api's pod patch against the cache: the API server's all-or-nothing patch,
    or ``error`` for the first ``failures`` calls."""

    def __init__(self, cache, error=None, failures=0):
        self.cache, self.error, self.failures, self.calls = cache, error, failures, 0

    async def patch_namespaced_pod(self, name, namespace, body):
        self.calls += 1
        assert (name, namespace) == ("jupyter-max", "jhub-ml-eng")
        if self.calls <= self.failures:
            raise self.error
        self.cache["pod"] = apply_patch(self.cache["pod"], body)


def _spawns(outcome: Outcome, pool: str) -> float:
    labels = {"profile": TRAINING, "outcome": outcome.value, "pool": pool}
    return REGISTRY.get_sample_value("jupyterhub_gpu_spawns_total", labels) or 0


def _queued(platform, cache, monkeypatch=None, core=None):
    """The spawn's queue-aware start, reading ``cache``; the hub's pod patches go to
    ``core``."""
    if monkeypatch is not None:
        monkeypatch.setattr(start_module, "shared_client", lambda kind: core)
    return QueuedStart(_grant(platform), "jhub-ml-eng", pod=lambda: cache["pod"],
                       workloads=lambda: cache["workloads"], events=list,
                       log=logging.getLogger("test"), who="max")


@pytest.mark.parametrize("failures", [0, 1])
async def test_the_hub_lets_the_admitted_pod_start_and_counts_its_pool(platform, monkeypatch,
                                                                       failures):
    """Admitted to the on-demand pool: the hub records it (after a refused patch, on
    the next look) and the pod may start; the spawn is counted on that pool."""
    cache = {"pod": gated_pod({}, gates=(POOL_GATE,)), "workloads": []}
    core = FakeCore(cache, ApiException(status=409, reason="Conflict"), failures)
    queued = _queued(platform, cache, monkeypatch, core)
    before = _spawns(Outcome.STARTED, "a100")

    async def start():  # KubeSpawner: the pod runs once nothing gates it
        cache["workloads"] = [admitted_workload("a100")]
        await until(lambda: not cache["pod"]["spec"]["schedulingGates"])
        cache["pod"]["status"]["phase"] = "Running"
        return "http://10.0.0.7:8888"

    assert await queued.run(start, Withdraw()) == "http://10.0.0.7:8888"
    assert cache["pod"]["metadata"]["annotations"][POOL_ANNOTATION] == "a100"
    assert core.calls == failures + 1
    assert _spawns(Outcome.STARTED, "a100") == before + 1


async def test_a_pool_gate_the_hub_may_not_lift_fails_the_spawn(platform, monkeypatch):
    """Without pods/patch (say, an older Role) the pod would wait forever: the spawn
    is refused, the pod withdrawn, and the user told."""
    cache = {"pod": gated_pod({}, gates=(POOL_GATE,)), "workloads": [admitted_workload("a100")]}
    core = FakeCore(cache, ApiException(status=403, reason="Forbidden"), failures=99)
    queued = _queued(platform, cache, monkeypatch, core)
    withdraw = Withdraw()

    async def start():
        await asyncio.Event().wait()

    before = _spawns(Outcome.FAILED, "a100")
    with pytest.raises(SpawnRefused) as info:
        await asyncio.wait_for(queued.run(start, withdraw), 30)
    assert str(info.value) == GATE_FAILED and info.value.outcome is Outcome.FAILED
    assert withdraw.calls == 1
    assert _spawns(Outcome.FAILED, "a100") == before + 1


def test_messages_name_any_pool_until_admitted_then_the_one_admitted(platform):
    grant = _grant(platform)
    before = wanted(grant)
    assert (before.pool, before.what) == ("a100spot or a100", "an A100-80GB GPU")
    cache = {"pod": {**gated_pod({}, gates=()), "spec": {}},
             "workloads": [admitted_workload("a100")]}
    assert _queued(platform, cache).watch.observe().message == "Finding an A100-80GB node in pool a100"


# -- after it stopped ------------------------------------------------------------------

def test_the_stop_notice_says_which_pool_the_server_ran_on():
    pod = gated_pod({POOL_ANNOTATION: "a100spot"}, gates=())
    pod["spec"] = {"nodeName": "aks-a100spot-0",
                   "nodeSelector": {AGENTPOOL_LABEL: "a100spot"}}
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                    "reason": "DeletionByTaintManager"}]
    at = datetime(2026, 12, 3, 9, 30, tzinfo=timezone.utc)
    notice = stop_notice(pod, None, "ml-eng", at, None)
    assert asdict(notice) == {
        "reason": "evicted", "at": at.isoformat(), "pool": "a100spot",
        "message": "Your server was stopped because its node was taken away (spot eviction "
                   "or node failure) at 09:30 UTC on 2026-12-03. It ran on pool a100spot. "
                   "Your files are kept."}
