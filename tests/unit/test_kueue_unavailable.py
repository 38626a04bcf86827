"""While Kueue's manager is down: what a queued spawn shows, how the hub finds out, and
what a spawn that cannot even be submitted tells its user."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio.client import ApiException

from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.contract import QUEUE_LABEL
from jupyterhub_gpu.kueue import status as st
from jupyterhub_gpu.kueue.lifecycle import QueueWatch, wanted
from jupyterhub_gpu.kueue.messages import (QUEUE_UNAVAILABLE, SUBMIT_UNAVAILABLE, Step,
                                          describe, queue_unavailable, submit_unavailable)
from jupyterhub_gpu.kueue.visibility import PendingWorkloads, probe_pod

from .test_kueue_messages import WAIT_MSG, W, pod, workload

# what kube-apiserver answers a pod create while Kueue's webhook server is down
# (as the dev cluster's kube-apiserver said it, tests/integration/test_kueue_outage.py)
REFUSED = json.dumps({
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "InternalError",
    "code": 500, "details": {"causes": [{"message": "..."}]},
    "message": 'Internal error occurred: failed calling webhook "mpod.kb.io": failed to '
               'call webhook: Post "https://127.0.0.1:12442/mutate--v1-pod?timeout=10s": '
               "dial tcp 127.0.0.1:12442: connect: connection refused"})
OTHER_WEBHOOK = REFUSED.replace("mpod.kb.io", "policy.example.com")


def refused(status: int, body: str) -> ApiException:
    e = ApiException(status=status, reason="refused")
    e.body = body
    return e


def test_the_words_are_defined_once_and_name_the_queue():
    assert queue_unavailable("data-science") == QUEUE_UNAVAILABLE.format(queue="data-science")
    assert "Queue data-science is temporarily unavailable" in queue_unavailable("data-science")
    words = submit_unavailable("ml-eng")
    assert words == SUBMIT_UNAVAILABLE.format(queue="ml-eng")
    assert "temporarily unavailable" in words and "Nothing was created" in words


@pytest.mark.parametrize("status,body,expected", [
    (500, REFUSED, True),
    (500, REFUSED.encode(), True),  # as the client may hand it over
    (500, OTHER_WEBHOOK, False),  # another admission webhook: not Kueue's outage
    (500, json.dumps({"message": "etcdserver: request timed out"}), False),
    (403, REFUSED, False),
    (500, None, False),
])
def test_kueue_not_answering(status, body, expected):
    assert st.kueue_not_answering(status, body) is expected


@pytest.mark.parametrize("the_workload,key", [
    (None, Step.QUEUE_DOWN),  # submitted, Kueue went before making its Workload
    (workload("w", reserved=False, message=WAIT_MSG), Step.QUEUE_DOWN),
    (workload("w", reserved=True), Step.ADMITTED),  # admitted: its quota is its own
])
def test_a_spawn_waiting_for_a_silent_queue_shows_no_position(the_workload, key):
    stage = describe(W, pod(), the_workload, (3, 7), [], queue_down=True)
    assert stage.key == key
    if key == Step.QUEUE_DOWN:
        assert stage.message == queue_unavailable("data-science")
        assert stage.position is None and stage.failure is None


def test_a_pod_past_admission_is_not_the_queues_business():
    stage = describe(W, pod(gated=False, node="n1"), workload("w", reserved=True), None, [],
                     queue_down=True)
    assert stage.key == Step.STARTING


class FakeApis:
    """What the API server answers: the visibility API (an exception or a summary) and
    a dry-run pod create (an exception or None); records the dry runs it was asked."""

    def __init__(self, visibility, dry_run=None):
        self.visibility, self.dry_run, self.probes = visibility, dry_run, []

    async def get_namespaced_custom_object(self, *args):
        if isinstance(self.visibility, Exception):
            raise self.visibility
        return self.visibility

    async def create_namespaced_pod(self, namespace, body, dry_run=None):
        self.probes.append((namespace, body, dry_run))
        if self.dry_run is not None:
            raise self.dry_run


def pending(now):
    return PendingWorkloads("ns", "q", refresh=5.0, clock=lambda: now[0])


async def test_a_served_visibility_api_that_fails_makes_the_queue_unavailable():
    now = [0.0]
    summary = {"items": [{"metadata": {"name": "w"}, "positionInLocalQueue": 1},
                         {"metadata": {"name": "x"}, "positionInLocalQueue": 0}]}
    api = FakeApis(summary)
    found = pending(now)
    await found.refresh_if_stale(api, api)
    assert found.available and found.position("w") == (2, 2)
    api.visibility = refused(503, "the server is currently unable to handle the request")
    now[0] = 10.0
    await found.refresh_if_stale(api, api)
    assert not found.available and found.position("w") is None  # no stale place
    assert api.probes == []  # the visibility API said it all
    api.visibility, now[0] = summary, 20.0
    await found.refresh_if_stale(api, api)
    assert found.available and found.position("w") == (2, 2)


async def test_without_the_visibility_api_a_dry_run_asks_kueue():
    now = [0.0]
    api = FakeApis(refused(404, "not found"), dry_run=refused(500, REFUSED))
    found = pending(now)
    await found.refresh_if_stale(api, api)
    assert found.served is False and not found.available
    namespace, body, dry_run = api.probes[0]
    assert (namespace, dry_run) == ("ns", "All") and body == probe_pod("q")
    assert body["metadata"]["labels"] == {QUEUE_LABEL: "q"}
    await found.refresh_if_stale(api, api)
    assert len(api.probes) == 1  # at most once per refresh, whoever asks
    api.dry_run, now[0] = refused(403, "forbidden by a policy"), 10.0
    await found.refresh_if_stale(api, api)
    assert found.available  # refused, but not for want of Kueue
    api.dry_run, now[0] = None, 20.0
    await found.refresh_if_stale(api, api)
    assert found.available and len(api.probes) == 3


async def test_the_jobs_service_without_a_core_api_never_probes():
    api = FakeApis(refused(404, "not found"), dry_run=refused(500, REFUSED))
    found = pending([0.0])
    await found.refresh_if_stale(api)
    assert found.served is False and found.available and api.probes == []


def test_a_queued_spawn_reads_the_queue_is_unavailable_then_its_place_again(platform):
    grant = authorize(platform, UserRef("ann", frozenset({"data-science"})),
                      {"profile": "a100-mig-3g"})
    mine = workload("pod-mine", reserved=False, message=WAIT_MSG, queue=grant.team.local_queue)
    answers = [True]
    watch = QueueWatch(wanted(grant), 600, pod=pod, workloads=lambda: [mine], events=list,
                       queue_answers=lambda: answers[0])
    assert watch.observe().message.endswith("position 1 of 1")
    answers[0] = False
    assert watch.observe().message == queue_unavailable(grant.team.local_queue)
    assert watch.stage.position is None
    answers[0] = True
    assert watch.observe().message.endswith("position 1 of 1")
