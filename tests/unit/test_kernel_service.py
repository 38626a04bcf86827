"""The gpu-kernels service's guards, against its real Tornado app and JupyterHub's
HubOAuth, as tests/unit/test_job_service.py does for gpu-jobs: a stand-in hub answers
``GET /hub/api/user`` for a few tokens, watches hold objects shaped as the API server
sends them, and a stand-in Kubernetes client records what the service's real
:func:`jupyterhub_gpu.kernels.cluster.create` and ``delete`` ask of the API server.
A user cannot start a kernel of a profile they may not use, exceed the cap, answer to
another's server, or see or delete another user's kernel; a forged field creates
nothing."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.error
import urllib.request
from http.cookies import SimpleCookie
from types import SimpleNamespace

import pytest
from jupyterhub.services.auth import HubOAuth
from kubernetes_asyncio.client import ApiException
from prometheus_client import CollectorRegistry
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from jupyterhub_gpu.contract import (ADMISSION_GATE, COMPONENT_LABEL, JOB_UID_LABEL,
                                     KERNEL_COMPONENT, KERNEL_ID_LABEL, KERNEL_IDLE_RELEASE,
                                     KERNEL_STOP_QUERY, KERNELS_ACCESS_SCOPE, POOL_ANNOTATION,
                                     POOL_GATE, READ_METRICS_SCOPE, SERVERNAME_KEY,
                                     SINGLEUSER_COMPONENT,
                                     USERNAME_KEY)
from jupyterhub_gpu.kernels import cluster
from jupyterhub_gpu.kernels.config import service_url
from jupyterhub_gpu.kernels.request import MAX_BODY_BYTES, gpu_profiles_for
from jupyterhub_gpu.kernels.service import Kernels, make_app, tend
from jupyterhub_gpu.kueue.series import KERNEL_RUNNING, KERNEL_STARTS, KERNEL_STOPS
from jupyterhub_gpu.ledger.store import Kind, Ledger, StopReason
from jupyterhub_gpu.usage.kernels import KernelRecorder
from jupyterhub_gpu.watches.reflectors import WorkloadReflector

ML, DS = "jhub-ml-eng", "jhub-data-science"
KEY = "MCowBQYDK2VuAyEA" + "B" * 28
IDS = [f"5f0c2d{n:02x}-8b1a-4c3e-9d7f-0a1b2c3d4e5f" for n in range(8)]  # pod names differ
CAROLS = "c0ffee00-8b1a-4c3e-9d7f-0a1b2c3d4e5f"
USERS = {  # token -> the model JupyterHub's GET /hub/api/user answers
    "bob-token": {"kind": "user", "name": "bob", "groups": ["ml-eng"],
                  "scopes": [KERNELS_ACCESS_SCOPE]},
    "carol-token": {"kind": "user", "name": "carol", "groups": ["ml-eng"],
                    "scopes": [KERNELS_ACCESS_SCOPE]},
    "dana-token": {"kind": "user", "name": "dana", "groups": ["data-science"],
                   "scopes": [KERNELS_ACCESS_SCOPE]},
    "erin-token": {"kind": "user", "name": "erin", "groups": ["ml-eng"],
                   "scopes": [KERNELS_ACCESS_SCOPE]},  # runs no server
    "unscoped-token": {"kind": "user", "name": "bob", "groups": ["ml-eng"], "scopes": []},
    "service-token-of-usage": {"kind": "service", "name": "gpu-usage",
                               "scopes": [KERNELS_ACCESS_SCOPE]},
    # the hub service Prometheus scrapes with (read:metrics only)
    "metrics-token": {"kind": "service", "name": "prometheus", "scopes": [READ_METRICS_SCOPE]},
    # a name that would forge a log line if logged as it is
    "mallory-token": {"kind": "user", "name": "mallory\n[W 2026 kernels] admin deleted all",
                      "groups": ["ml-eng"], "scopes": [KERNELS_ACCESS_SCOPE]},
}


class HubUser(web.RequestHandler):
    def get(self):
        model = USERS.get(self.request.headers.get("Authorization", "").removeprefix("token "))
        if model is None:
            raise web.HTTPError(403)
        self.finish(json.dumps(model))


def _server(user: str, ns: str, ip: str) -> dict:
    return {"metadata": {"name": f"jupyter-{user}", "namespace": ns,
                         "labels": {COMPONENT_LABEL: SINGLEUSER_COMPONENT, USERNAME_KEY: user,
                                    SERVERNAME_KEY: ""},
                         "annotations": {USERNAME_KEY: user}},
            "spec": {"securityContext": {"runAsUser": 1000, "fsGroup": 100},
                     "volumes": [{"name": "home",
                                  "persistentVolumeClaim": {"claimName": f"claim-{user}"}}],
                     "containers": [{"image": "acr.io/nb:1", "volumeMounts": [
                         {"name": "home", "mountPath": "/home/jovyan"}]}]},
            "status": {"phase": "Running", "podIP": ip}}


def _carols_kernel() -> dict:
    return {"metadata": {"name": "kernel-carol-c0ffee008b1a", "namespace": ML, "uid": "k-carol",
                         "labels": {COMPONENT_LABEL: KERNEL_COMPONENT, KERNEL_ID_LABEL: CAROLS},
                         "annotations": {USERNAME_KEY: "carol"}},
            "spec": {}, "status": {"phase": "Running", "podIP": "10.244.2.9"}}


def _watches(platform, watches: cluster.Watches | None = None) -> cluster.Watches:
    """Bob's, carol's and dana's running servers, and carol's running kernel, in the
    service's pod and Workload watches (never started: fed here as the API's events
    would; made in a running event loop, as KubeSpawner's reflectors are; telling
    their pod listener, as :meth:`start` makes them)."""
    watches = watches or cluster.Watches(t.namespace for t in platform.teams)
    for ns in watches.namespaces:
        watches.jobs[ns] = SimpleNamespace(resources={})
        watches.pods[ns], watches.workloads[ns] = (watches.pod_reflector(ns),
                                                   WorkloadReflector(namespace=ns))
        watches.pods[ns].resources, watches.workloads[ns].resources = {}, {}
    for pod in (_server("bob", ML, "10.244.1.7"), _server("carol", ML, "10.244.1.8"),
                _server("dana", DS, "10.244.3.4"), _carols_kernel()):
        meta = pod["metadata"]
        watches.pods[meta["namespace"]].resources[f"{meta['namespace']}/{meta['name']}"] = pod
    watches.ready = True
    return watches


class _Api:
    """A stand-in for the kubernetes_asyncio clients ``cluster`` asks for: records
    each call; a NetworkPolicy fails when ``fail_policies`` is set."""

    def __init__(self, calls: list, fail_policies: list):
        self.calls, self.fail = calls, fail_policies
        self.api_client = SimpleNamespace(sanitize_for_serialization=lambda o: o)

    async def create_namespaced_pod(self, ns, pod):
        if any(c[0] == "create pod" and c[2]["metadata"]["name"] == pod["metadata"]["name"]
               for c in self.calls):
            self.calls.append(("conflict", ns, pod["metadata"]["name"]))
            raise ApiException(status=409, reason="AlreadyExists")
        pod = json.loads(json.dumps(pod))
        pod["metadata"]["uid"] = f"uid-{len(self.calls)}"
        self.calls.append(("create pod", ns, pod))
        return pod

    async def create_namespaced_network_policy(self, ns, policy):
        if self.fail:
            raise ApiException(status=403, reason="Forbidden")
        self.calls.append(("create policy", ns, json.loads(json.dumps(policy))))

    async def delete_namespaced_pod(self, name, ns):
        self.calls.append(("delete pod", ns, name))

    async def patch_namespaced_pod(self, name, ns, patch):
        self.calls.append(("patch pod", ns, name, patch))


@pytest.fixture
def kube(monkeypatch):
    """What the API server was asked; the pod watch never shows the new pods."""
    calls: list = []
    fail: list = []
    monkeypatch.setattr(cluster, "shared_client", lambda kind: _Api(calls, fail))
    monkeypatch.setattr(cluster, "SEEN_TIMEOUT", 0.05)
    return SimpleNamespace(calls=calls, fail=fail)


@pytest.fixture
def service(example_spec_path, platform, tmp_path):
    """The service's app on a port of its own, recording kernels in a SQLite ledger."""
    loop = asyncio.new_event_loop()
    (sock,) = bind_sockets(0, "127.0.0.1", family=2)
    port = sock.getsockname()[1]
    prefix = "/services/gpu-kernels/"

    async def start():
        auth = HubOAuth(api_token="service-token", api_url=f"http://127.0.0.1:{port}/hub/api",
                        access_scopes={KERNELS_ACCESS_SCOPE}, cache_max_age=0,
                        oauth_client_id="service-gpu-kernels", base_url=prefix)
        watches = cluster.Watches(t.namespace for t in platform.teams)
        ledger = Ledger(f"sqlite:///{tmp_path}/usage.sqlite")
        kernels = Kernels(str(example_spec_path), watches,
                          usage=KernelRecorder(ledger, watches, lambda: platform),
                          registry=CollectorRegistry())
        _watches(platform, watches)  # the watches start after the service's state is made
        app = make_app(kernels, prefix, auth)
        app.add_handlers(".*", [("/hub/api/user", HubUser)])
        server = HTTPServer(app)
        server.add_sockets([sock])
        return server, SimpleNamespace(kernels=kernels, app=app, auth=auth,
                                       url=service_url(f"http://127.0.0.1:{port}"))

    server, made = loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield made
    loop.call_soon_threadsafe(server.stop)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    made.kernels.usage.ledger.dispose()


def _call(url: str, method: str = "GET", body: bytes | None = None,
          headers: dict | None = None) -> tuple[int, dict, dict]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def _body(n: int = 0, **changes) -> dict:
    return {"profile": "t4-shared", "kernel_id": IDS[n], "response_address": "10.244.1.7:52699",
            "public_key": KEY, **changes}


def _start(service, body, token: str = "bob-token") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, said, _ = _call(service.url + "api/kernels", "POST", data,
                            {"Authorization": f"token {token}"})
    return status, said


def _created(kube, kind: str) -> list[dict]:
    return [c[2] for c in kube.calls if c[0] == f"create {kind}"]


def test_a_kernel_starts_in_the_users_team_namespace_for_their_server(service, kube):
    status, said = _start(service, _body())
    assert status == 201, said
    assert said["id"] == IDS[0] and said["namespace"] == ML and said["profile"] == "t4-shared"
    (pod,) = _created(kube, "pod")
    assert pod["metadata"]["annotations"] == {USERNAME_KEY: "bob"}
    assert pod["metadata"]["labels"][KERNEL_ID_LABEL] == IDS[0]
    assert pod["spec"]["containers"][0]["command"][-1] == KEY
    assert {"claimName": "claim-bob"} in [v.get("persistentVolumeClaim")
                                          for v in pod["spec"]["volumes"]]  # bob's home
    policies = _created(kube, "policy")
    assert len(policies) == 2
    for policy in policies:  # owned by the pod: they go with it
        assert policy["metadata"]["namespace"] == ML
        assert policy["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    on_server = policies[1]["spec"]["podSelector"]["matchLabels"]
    assert on_server[USERNAME_KEY] == "bob" and on_server[SERVERNAME_KEY] == ""


def test_a_profile_the_user_may_not_use_creates_nothing(service, kube, platform):
    dana = frozenset({"data-science"})
    forbidden = next(p.slug for p in platform.profiles
                     if platform.uses_gpu(p) and p not in gpu_profiles_for(platform, dana))
    status, said = _start(service, _body(profile=forbidden,
                                         response_address="10.244.3.4:52699"), "dana-token")
    assert status == 403 and said["error"].startswith(f"You may not use profile '{forbidden}'")
    status, said = _start(service, _body(profile="cpu"))
    assert status == 400 and "has no GPU kernel" in said["error"]
    assert kube.calls == []


@pytest.mark.parametrize("forged,words", [
    ({"namespace": "kube-system"}, "may not set namespace"),
    ({"image": "evil:latest"}, "may not set image"),
    ({"command": ["sh"]}, "unknown: 'command'"),
    ({"kernel_id": "../../etc"}, "Invalid kernel_id"),
    ({"public_key": "--exec=sh"}, "Invalid public_key"),
])
def test_a_forged_field_creates_nothing(service, kube, forged, words):
    status, said = _start(service, _body(**forged))
    assert status == 400 and words in said["error"], said
    assert kube.calls == []


def test_the_kernel_answers_only_to_the_callers_own_running_server(service, kube):
    status, said = _start(service, _body(response_address="10.244.1.8:52699"))  # carol's
    assert status == 403 and "must be your server's, 10.244.1.7:52699" in said["error"]
    status, said = _start(service, _body(response_address="10.244.1.7:8888"))
    assert status == 403
    status, said = _start(service, _body(), "erin-token")
    assert status == 409 and said["error"].startswith("Start your server first")
    assert kube.calls == []


def test_the_cap_holds_while_the_pod_watch_lags(service, kube):
    """The watch has not shown the pods just created: the cap (2) still counts them;
    once it shows them they count once, and once their kernels end, no more."""
    answers = [_start(service, _body(n))[0] for n in range(4)]
    assert answers == [201, 201, 409, 409] and len(_created(kube, "pod")) == 2
    status, said = _start(service, _body(5))
    assert said["error"].startswith("You have 2 GPU kernel(s) running or queued")
    pods = service.kernels.watches.pods[ML].resources
    for pod in _created(kube, "pod"):  # the watch catches up
        pod["status"] = {"phase": "Pending"}
        pods[f"{ML}/{pod['metadata']['name']}"] = pod
    assert service.kernels.active_count("bob") == 2
    assert _start(service, _body(6))[0] == 409
    for pod in _created(kube, "pod"):
        pod["status"] = {"phase": "Succeeded"}
    assert service.kernels.active_count("bob") == 0
    assert _start(service, _body(7))[0] == 201


def test_a_kernel_id_already_taken_creates_no_second_pod(service, kube):
    assert _start(service, _body())[0] == 201
    service.kernels._unseen.clear()  # a kernel that ended, its pod not yet gone
    status, said = _start(service, _body())
    assert status == 409 and said["error"] == f"You already have kernel {IDS[0]}."
    (pod,) = _created(kube, "pod")
    service.kernels.watches.pods[ML].resources[f"{ML}/{pod['metadata']['name']}"] = pod
    status, said = _start(service, _body())  # now the watch knows it: no API call
    assert status == 409 and said["error"] == f"You already have kernel {IDS[0]}."
    assert [c[0] for c in kube.calls if "pod" in c[0] or c[0] == "conflict"] == [
        "create pod", "conflict"]


def test_no_user_sees_or_deletes_another_users_kernel(service, kube):
    bob = {"Authorization": "token bob-token"}
    assert _call(service.url + "api/kernels", headers=bob)[1] == {"kernels": []}
    for method in ("GET", "DELETE"):
        status, said, _ = _call(service.url + f"api/kernels/{CAROLS}", method, headers=bob)
        assert status == 404 and said["error"] == f"You have no kernel '{CAROLS}'."
    status, said, _ = _call(service.url + "api/kernels",
                            headers={"Authorization": "token service-token-of-usage"})
    assert status == 403 and said["error"] == "Only users have kernels."
    assert kube.calls == []
    carol = {"Authorization": "token carol-token"}
    (mine,) = _call(service.url + "api/kernels", headers=carol)[1]["kernels"]
    assert mine["id"] == CAROLS and mine["phase"] == "Running" and mine["address"] == "10.244.2.9"
    status, said, _ = _call(service.url + f"api/kernels/{CAROLS}", "DELETE", headers=carol)
    assert status == 200 and said["phase"] == "Deleting"
    assert kube.calls == [("delete pod", ML, "kernel-carol-c0ffee008b1a")]


def test_a_policy_that_cannot_be_made_takes_the_pod_with_it(service, kube):
    kube.fail.append(True)
    status, _ = _start(service, _body())
    assert status == 500
    (pod,) = _created(kube, "pod")
    assert kube.calls[-1] == ("delete pod", ML, pod["metadata"]["name"])


def test_the_callers_token_and_scope_and_a_browsers_xsrf_are_checked(service, kube):
    data = json.dumps(_body()).encode()
    cookie = web.create_signed_value(service.app.settings["cookie_secret"],
                                     service.auth.cookie_name, "bob-token").decode()
    browser = {"Cookie": f"{service.auth.cookie_name}={cookie}", "Sec-Fetch-Mode": "cors",
               "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}
    status, said, _ = _call(service.url + "api/kernels", "POST", data,
                            {**browser, "Authorization": "token x"})
    assert status == 403 and "does not know this token" in said["error"]
    status, said, _ = _call(service.url + "api/kernels", "POST", data,
                            {"Authorization": "token unscoped-token"})
    assert status == 403 and "lacks the scope" in said["error"]
    assert _call(service.url + "api/kernels", "POST", data, browser)[0] == 403, "no XSRF"
    assert kube.calls == []
    _, _, headers = _call(service.url + "api/kernels",
                          headers={**browser, "Sec-Fetch-Mode": "navigate"})
    xsrf = SimpleCookie(headers["Set-Cookie"])["_xsrf"].value
    browser.update({"Cookie": f"{browser['Cookie']}; _xsrf={xsrf}", "X-XSRFToken": xsrf})
    assert _call(service.url + "api/kernels", "POST", data, browser)[0] == 201


def test_the_body_is_bounded_and_log_lines_escape_user_input(service, kube, caplog):
    caplog.set_level(logging.INFO, "jupyterhub_gpu.kernels")
    status, said = _start(service, _body(public_key="A" * MAX_BODY_BYTES))
    assert status == 413 and f"at most {MAX_BODY_BYTES} bytes" in said["error"]
    assert _start(service, b"\xff\xfe")[0] == 400
    _start(service, _body(profile="x\n[I] forged"), "mallory-token")
    lines = [r.getMessage() for r in caplog.records if r.name == "jupyterhub_gpu.kernels"]
    assert lines and all("\n" not in line for line in lines), lines
    assert any(line.startswith("Refused kernel of user mallory\\n[W 2026 kernels] admin")
               for line in lines)
    assert kube.calls == []


def test_a_fallback_profiles_kernel_starts_once_kueue_admits_it(service, kube, platform):
    """Its pod carries the pool gate, as a server of the profile would; the service
    records the pool Kueue admitted it to and lifts the gate, as the hub does for a
    server, and only then."""
    assert _start(service, _body(profile="a100-training"))[0] == 201
    (pod,) = _created(kube, "pod")
    assert {"name": POOL_GATE} in pod["spec"]["schedulingGates"]
    pod["status"] = {"phase": "Pending"}
    service.kernels.watches.pods[ML].resources[f"{ML}/{pod['metadata']['name']}"] = pod
    workload = {"metadata": {"name": "pod-kernel", "namespace": ML,
                             "labels": {JOB_UID_LABEL: pod["metadata"]["uid"]}},
                "spec": {"queueName": "ml-eng"}, "status": {}}
    service.kernels.watches.workloads[ML].resources = {"w": workload}
    assert asyncio.run(cluster.record_pools(service.kernels.watches, platform)) == []
    # Kueue admits it: a watch event stores the new state (the watch keeps a copy)
    service.kernels.watches.workloads[ML].resources["w"] = {**workload, "status": {
        "admission": {"podSetAssignments": [{"flavors": {"cpu": "a100"}}]},
        "conditions": [{"type": "Admitted", "status": "True"}]}}
    name = pod["metadata"]["name"]
    assert asyncio.run(cluster.record_pools(service.kernels.watches, platform)) == [
        f"{ML}/{name}"]
    (_, ns, patched, patch), = [c for c in kube.calls if c[0] == "patch pod"]
    assert (ns, patched) == (ML, name)
    assert {"op": "remove", "path": f"/spec/schedulingGates/"
            f"{pod['spec']['schedulingGates'].index({'name': POOL_GATE})}"} in patch
    (added,) = [op["value"] for op in patch if op["path"] == "/metadata/annotations/"
                + POOL_ANNOTATION.replace("/", "~1")]
    assert added == "a100"


def test_a_kernel_says_where_its_start_is_and_why_the_platform_took_it_back(service, kube):
    """In the spawn page's words, from the watches (kernels.progress): queued, at its
    place in the team's queue; its machine starting (Karpenter's event); preempted."""
    assert _start(service, _body())[0] == 201
    (pod,) = _created(kube, "pod")
    pod["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]  # Kueue's webhook
    pod["status"] = {"phase": "Pending"}
    watches = service.kernels.watches
    watches.pods[ML].resources[f"{ML}/{pod['metadata']['name']}"] = pod

    def workload(uid: str, created: str) -> dict:
        return {"metadata": {"name": f"pod-{uid}", "namespace": ML, "creationTimestamp": created,
                             "labels": {JOB_UID_LABEL: uid}},
                "spec": {"queueName": "ml-eng", "priority": 1000},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "False"}]}}

    mine = workload(pod["metadata"]["uid"], "2026-12-02T10:05:00Z")
    watches.workloads[ML].resources = {"a": workload("other", "2026-12-02T10:00:00Z"),
                                       "b": mine}
    url, bob = service.url + f"api/kernels/{IDS[0]}", {"Authorization": "token bob-token"}
    said = _call(url, headers=bob)[1]
    assert said["stage"] == {"step": "queued", "position": [2, 2], "message":
                             "Waiting for a T4 time-sliced share in queue ml-eng: position 2 of 2"}
    assert said["stopped"] is None
    mine["status"] = {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                      "admission": {"podSetAssignments": [{"flavors": {"cpu": "t4dev"}}]}}
    pod["spec"]["schedulingGates"] = []
    watches.events[ML] = SimpleNamespace(events_of=lambda ns, name: [
        {"reason": "Nominated", "message": "Pod should schedule on: nodeclaim/t4dev-x",
         "source": {"component": "karpenter"}}] if name == pod["metadata"]["name"] else [])
    assert _call(url, headers=bob)[1]["stage"] == {
        "step": "scale-up", "position": None,
        "message": "Starting a new T4 machine for pool t4dev; this usually takes about 10 minutes"}
    pod["spec"]["nodeName"] = "t4dev-x"
    pod["status"] = {"phase": "Running", "podIP": "10.244.5.5", "conditions": [
        {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted"}]}
    mine["status"]["conditions"].append({"type": "Preempted", "status": "True",
                                         "reason": "InClusterQueue"})
    said = _call(url, headers=bob)[1]
    assert said["stopped"] == {"reason": "preempted", "words": "preempted to make room for "
                               "higher-priority work in queue ml-eng"}
    assert said["phase"] == "Running" and said["address"] == "10.244.5.5"


def test_the_kernelspecs_are_the_callers_gpu_profiles(service, platform, kube):
    """One kernelspec per GPU profile the caller's groups may use, naming the GPU
    kernels' provisioner and the profile; a CPU profile has none; no token, none."""
    from jupyterhub_gpu.contract import KERNEL_PROVISIONER_NAME
    from jupyterhub_gpu.kernels.specs import kernelspec

    for token, groups in (("bob-token", {"ml-eng"}), ("dana-token", {"data-science"})):
        status, said, _ = _call(service.url + "api/kernelspecs",
                                headers={"Authorization": f"token {token}"})
        assert status == 200, said
        mine = gpu_profiles_for(platform, groups)
        assert mine and sorted(said["kernelspecs"]) == sorted(f"gpu-{p.slug}" for p in mine)
        for profile in mine:
            spec = said["kernelspecs"][f"gpu-{profile.slug}"]
            assert spec == kernelspec(platform, profile)
            assert spec["metadata"]["kernel_provisioner"] == {
                "provisioner_name": KERNEL_PROVISIONER_NAME,
                "config": {"profile": profile.slug}}
            assert spec["interrupt_mode"] == "message"
    assert not any(p.slug == "cpu" for p in gpu_profiles_for(platform, {"data-science"}))
    status, said, _ = _call(service.url + "api/kernelspecs",
                            headers={"Authorization": "token not-a-token"})
    assert status == 403 and "kernelspecs" not in said
    assert kube.calls == []


async def test_a_kernel_whose_server_is_gone_is_deleted(platform, kube):
    """The service's pass over its watches: a kernel answering to its owner's live
    server stays; one of a server that is gone, or that runs again at another address
    (a new pod, whose kernel manager does not know it), is deleted; nothing before
    every watch has listed."""
    from jupyterhub_gpu.builders.kernel import (KernelRequest, Launch, Owner, build_kernel_pod,
                                                kernel_name)
    from jupyterhub_gpu.spec.grant import UserRef, authorize

    watches = _watches(platform)
    # here every kernel is as the service builds it (the shared one is bare)
    del watches.pods[ML].resources[f"{ML}/{_carols_kernel()['metadata']['name']}"]
    grant = authorize(platform, UserRef("bob", frozenset({"ml-eng"})), {"profile": "t4-shared"})

    def kernel(user: str, n: int, server_ip: str, deleting: bool = False) -> dict:
        pod = build_kernel_pod(platform, KernelRequest(
            kernel_name(user, IDS[n]), user, Owner(user, ""), grant,
            Launch(IDS[n], f"{server_ip}:52699", KEY)))
        pod["metadata"]["annotations"] = {USERNAME_KEY: user}
        if deleting:
            pod["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
        watches.pods[ML].resources[f"{ML}/{pod['metadata']['name']}"] = pod
        return pod

    kernel("bob", 0, "10.244.1.7")  # bob's server is at 10.244.1.7: it stays
    stale = kernel("bob", 1, "10.244.1.99")  # an earlier pod of bob's server
    lost = kernel("erin", 2, "10.244.1.50")  # erin runs no server
    kernel("erin", 3, "10.244.1.50", deleting=True)  # going already
    watches.ready = False
    assert await cluster.delete_orphans(watches) == [] and kube.calls == []
    watches.ready = True
    done = await cluster.delete_orphans(watches)
    assert sorted(done) == sorted(f"{ML}/{p['metadata']['name']}" for p in (stale, lost))
    assert sorted(c[2] for c in kube.calls if c[0] == "delete pod") == sorted(
        p["metadata"]["name"] for p in (stale, lost))


def _shown(service, pod: dict, **status) -> dict:
    """``pod``, as the pod watch shows it now (with ``status``)."""
    pod["status"] = status or {"phase": "Running", "podIP": "10.244.2.20"}
    service.kernels.watches.pods[ML].resources[f"{ML}/{pod['metadata']['name']}"] = pod
    return pod


def test_the_ledger_says_why_each_kernel_stopped(service, kube):
    """The service records a kernel when it creates it, and before it deletes it: its
    user's shutdown, its server's idle release (``?stop-reason=idle-release``), its
    server gone.
    Any other reason is refused and deletes nothing."""
    bob = {"Authorization": "token bob-token"}
    ledger = service.kernels.usage.ledger
    for n in range(2):
        assert _start(service, _body(n))[0] == 201
    pods = [_shown(service, p) for p in _created(kube, "pod")]
    rows = {r.key: r for r in ledger.rows_sync(Kind.KERNEL)}
    assert sorted(rows) == sorted(f"kernel:{p['metadata']['uid']}" for p in pods)
    assert {(r.user, r.team, r.profile, r.gpu_units, r.stopped_at) for r in rows.values()} \
        == {("bob", "ml-eng", "t4-shared", 1, None)}

    for forged in ("user", "idle", "idle-release%0A[W]%20forged", "x" * 300):
        status, said, _ = _call(service.url + f"api/kernels/{IDS[0]}?{KERNEL_STOP_QUERY}="
                                f"{forged}", "DELETE", headers=bob)
        assert status == 400 and said["error"] == (
            "A kernel's deletion gives no stop-reason, or stop-reason=idle-release."), said
    assert [c for c in kube.calls if c[0] == "delete pod"] == []
    # the server released the first, idle: its kernel had exited on the shutdown request
    _shown(service, pods[0], phase="Succeeded", containerStatuses=[{"state": {"terminated": {
        "startedAt": "2026-12-07T09:00:00Z", "finishedAt": "2026-12-07T10:00:00Z"}}}])
    assert _call(service.url + f"api/kernels/{IDS[0]}?{KERNEL_STOP_QUERY}="
                 f"{KERNEL_IDLE_RELEASE}", "DELETE", headers=bob)[0] == 200
    assert _call(service.url + f"api/kernels/{IDS[1]}", "DELETE", headers=bob)[0] == 200
    rows = {r.server: r for r in ledger.rows_sync(Kind.KERNEL)}
    idle, shut = (rows[p["metadata"]["name"]] for p in pods)
    assert (idle.stop_reason, idle.stopped_at.isoformat()) == (
        StopReason.IDLE_RELEASE, "2026-12-07T10:00:00+00:00")  # when its kernel ended
    assert shut.stop_reason is StopReason.USER and shut.stopped_at is not None

    # a third kernel, whose server then goes: the service's pass deletes it, as bob's
    for pod in pods:  # the watch shows them going
        pod["metadata"]["deletionTimestamp"] = "2026-12-07T10:00:30Z"
    assert _start(service, _body(2))[0] == 201
    orphan = _shown(service, _created(kube, "pod")[2])
    del service.kernels.watches.pods[ML].resources[f"{ML}/jupyter-bob"]
    asyncio.run(tend(service.kernels))
    assert kube.calls[-1] == ("delete pod", ML, orphan["metadata"]["name"])
    row = next(r for r in ledger.rows_sync(Kind.KERNEL) if r.server == orphan["metadata"]["name"])
    assert row.stop_reason is StopReason.USER and row.stopped_at is not None


def _scrape(service, headers: dict) -> tuple[int, str]:
    """``GET metrics``: its status and its text."""
    request = urllib.request.Request(service.url + "metrics", headers=headers)
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_only_a_caller_with_read_metrics_reads_the_metrics(service, kube):
    """As the hub's /hub/metrics: the token of a holder of ``read:metrics`` (the hub
    service Prometheus scrapes with); not a user's token without it, nor an unknown
    token, nor none, nor a user's browser. Answered while the watches start, without
    the numbers they give."""
    status, text = _scrape(service, {"Authorization": "token metrics-token"})
    assert status == 200 and f"# TYPE {KERNEL_STARTS} counter" in text
    assert f'{KERNEL_RUNNING}{{pool="t4dev",profile="t4-shared"}} 0.0' in text
    cookie = web.create_signed_value(service.app.settings["cookie_secret"],
                                     service.auth.cookie_name, "bob-token").decode()
    for headers, words in (({"Authorization": "token bob-token"}, "lacks the scope read:metrics"),
                           ({"Authorization": "token x"}, "does not know this token"),
                           ({}, "needs a token with the scope read:metrics"),
                           ({"Cookie": f"{service.auth.cookie_name}={cookie}"}, "lacks the scope")):
        status, text = _scrape(service, headers)
        assert status == 403 and words in json.loads(text)["error"], (headers, text)
        assert KERNEL_STARTS not in text
    service.kernels.watches.ready = False  # the watches (re)starting: the API answers 503
    assert _start(service, _body())[0] == 503
    status, text = _scrape(service, {"Authorization": "token metrics-token"})
    assert status == 200 and KERNEL_STARTS in text and f"{KERNEL_RUNNING}{{" not in text


def test_the_metrics_count_each_kernel_the_service_starts_and_stops(service, kube):
    """Through the API: refusals (by the profile asked for, if the spec has it), a start
    whose policies could not be made (once: not again when its pod goes), a start that
    runs, its server's idle release, and the deletion of a kernel whose server is gone."""
    metrics = {"Authorization": "token metrics-token"}

    def value(name: str, **labels) -> float:
        _, text = _scrape(service, metrics)
        shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        found = [line.rpartition(" ")[2] for line in text.splitlines()
                 if line.startswith(f"{name}{{{shown}}} ")]
        return float(found[0]) if found else 0.0

    assert _start(service, _body(profile="cpu"))[0] == 400
    assert _start(service, _body(profile="x\n[I] forged"))[0] == 400
    assert _start(service, _body(), "erin-token")[0] == 409  # no server
    none = {"pool": "none"}
    assert value(KERNEL_STARTS, profile="cpu", outcome="refused", **none) == 1
    assert value(KERNEL_STARTS, profile="unknown", outcome="refused", **none) == 1
    assert value(KERNEL_STARTS, profile="t4-shared", outcome="refused", **none) == 1

    kube.fail.append(True)
    assert _start(service, _body())[0] == 500
    kube.fail.clear()
    (undone,) = _created(kube, "pod")
    _shown(service, undone, phase="Pending")  # the watch shows it, then its deletion
    service.kernels.watches.pods[ML].resources.pop(f"{ML}/{undone['metadata']['name']}")
    assert value(KERNEL_STARTS, profile="t4-shared", outcome="failed", **none) == 1
    assert value(KERNEL_STARTS, profile="t4-shared", outcome="cancelled", **none) == 0

    t4 = {"profile": "t4-shared", "pool": "t4dev"}
    for n in (1, 2):
        assert _start(service, _body(n))[0] == 201
    idle, orphan = (_shown(service, p, phase="Pending") for p in _created(kube, "pod")[1:])
    for pod in (idle, orphan):
        _shown(service, pod, phase="Running", podIP="10.244.2.20", containerStatuses=[
            {"state": {"running": {"startedAt": "2026-12-07T09:00:00Z"}}}])
    assert value(KERNEL_STARTS, outcome="started", **t4) == 2
    assert value(KERNEL_RUNNING, **t4) == 2
    assert _call(service.url + f"api/kernels/{IDS[1]}?{KERNEL_STOP_QUERY}={KERNEL_IDLE_RELEASE}",
                 "DELETE", headers={"Authorization": "token bob-token"})[0] == 200
    idle["metadata"]["deletionTimestamp"] = "2026-12-07T10:00:30Z"  # the watch shows it go
    _shown(service, idle, **idle["status"])
    service.kernels.watches.pods[ML].resources.pop(f"{ML}/{idle['metadata']['name']}")
    del service.kernels.watches.pods[ML].resources[f"{ML}/jupyter-bob"]  # bob's server goes
    asyncio.run(tend(service.kernels))
    orphan["metadata"]["deletionTimestamp"] = "2026-12-07T10:01:00Z"
    _shown(service, orphan, **orphan["status"])
    assert value(KERNEL_STOPS, reason="idle-release", **t4) == 1
    assert value(KERNEL_STOPS, reason="user", **t4) == 1
    assert value(KERNEL_RUNNING, **t4) == 0
    assert value(KERNEL_STARTS, outcome="started", **t4) == 2  # counted once each
