"""Hostile job requests and service calls through the real hub and its services
(issue #25): every row of :data:`.hostile_cases.CASES` (forged fields, wrong types,
huge sizes, option-like scripts, path escapes, NUL/newline/Unicode tricks, other
users' jobs, forged same-origin cookie requests, unknown and wrongly scoped tokens,
usage-page parameters a user may not use, submissions over ``jobsPerUser``) and a
burst of over-limit submissions at once, all through the proxy, as a browser or a
notebook would send them.

Shown: every one is refused with the status its row names (a 4xx, never a 5xx, never
a 2xx), its answer echoes no huge input and no secret; the kube-apiserver's audit log
(:mod:`.audit`) has no write of the hub's identity (the hub and its services) and no
Job, Pod, Service, PVC or Workload created by anyone between the first request and
the last; the hub's log (its services' too) has no forged line, no over-long line and
no credential. Legitimate requests in the same window (alice's job list, her usage
page, the admin's CSV) are answered 200, so the harness can see an acceptance; before
the window, alice submits her two jobs (201).
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from yarl import URL as Url

from jupyterhub_gpu.contract import (ENV_API_TOKEN, JOBS_API_PATH, JOBS_SERVICE_NAME,
                                     USAGE_CSV_PATH, USAGE_SERVICE_NAME, USERNAME_KEY)
from jupyterhub_gpu.devcluster.contract import ENV_DEMO_JOB_RUN_FOR, ENV_DEMO_PROMETHEUS_URL

from . import hubrest
from .audit import AuditLog
from .conftest import STATE_DIR, wait_for
from .hostile_cases import (BURST, CASES, FORGED_LINE, HUB, JOBS, LOGIN, SECRET_ARG, USAGE,
                            Case, js, valid)
from .test_demo import URL, _login_session
from .test_forged_rest import HUB_IDENTITY

USERS = ("alice", "dave", "bob", "carol", "erin", "admin")  # hostile_cases says who is who
# The usage page's Prometheus, with credentials in its URL (nothing listens there)
PROMETHEUS_SECRET = "s3cret-prometheus-password"
PROMETHEUS = f"http://scraper:{PROMETHEUS_SECRET}@127.0.0.1:9/"
SECRETS = (PROMETHEUS_SECRET, SECRET_ARG)
BASE = {JOBS: f"{URL}/services/{JOBS_SERVICE_NAME}/",
        USAGE: f"{URL}/services/{USAGE_SERVICE_NAME}/", HUB: f"{URL}/hub/"}
MAX_ANSWER = MAX_LOG_LINE = 8 << 10  # no huge input echoed back or logged whole
CREATED = frozenset({"jobs", "pods", "services", "persistentvolumeclaims", "workloads"})
NAMESPACE = "jhub-data-science"


@dataclass
class Hub:
    http: aiohttp.ClientSession  # the admin's session (set-up only)
    tokens: dict[str, str]  # who (hostile_cases' vocabulary) -> API token
    cookies: dict[str, aiohttp.ClientSession]  # user -> their browser session
    log: Path
    fill: dict[str, str]  # the paths' and headers' placeholders

    async def close(self, kube):
        """Close the browsers; delete every Job of alice's and dave's (the next tests
        need the team's quota), as the cluster's admin."""
        for session in self.cookies.values():
            await session.close()
        await _delete_jobs(kube, {"alice", "dave"})


@dataclass(frozen=True)
class Answer:
    status: int
    text: str
    location: str


@pytest.fixture(scope="module")
async def hostile_hub(cluster, cluster_spec_path, hub_kubeconfig, tmp_path_factory):
    """The demo hub (jobs run for an hour, the usage page's Prometheus URL has a
    password); each user's API token."""
    workdir = tmp_path_factory.mktemp("hostile-hub")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ENV_DEMO_JOB_RUN_FOR, "1h")
        env.setenv(ENV_DEMO_PROMETHEUS_URL, PROMETHEUS)
        async with hubrest.hub_with_tokens(cluster, cluster_spec_path, hub_kubeconfig,
                                           workdir) as (http, token):
            tokens = {user: await token(user) for user in USERS}
            yield http, tokens, workdir / "hub.log"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"token {token}"}


async def _call(session, method: str, url: str, body: bytes | None = None,
                headers: dict | None = None, follow: bool = False) -> Answer:
    headers = {"Content-Type": "application/json", **(headers or {})} if body is not None \
        else headers or {}
    async with session.request(method, Url(url, encoded=True), data=body, headers=headers,
                               allow_redirects=follow) as r:
        text = await r.text(errors="replace")
        return Answer(r.status, text, r.headers.get("Location", ""))


async def _running(http, user: str, token: str) -> bool:
    return bool((await hubrest.server(http, user, token) or {}).get("ready"))


async def _server_token(kube, user: str) -> str:
    pod = await kube.core.read_namespaced_pod(f"jupyter-{user}", NAMESPACE)
    return next(e.value for e in pod.spec.containers[0].env if e.name == ENV_API_TOKEN)


async def _delete_jobs(kube, users: set[str]) -> None:
    from kubernetes_asyncio import client

    batch = client.BatchV1Api(kube.api_client)

    async def left():
        jobs = (await batch.list_namespaced_job(NAMESPACE)).items
        return [j.metadata.name for j in jobs
                if (j.metadata.annotations or {}).get(USERNAME_KEY) in users]

    for name in await left():
        await batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")
    await wait_for(lambda: _none(left()), timeout=120, interval=1, what=f"{users}' jobs to go")


async def _none(listing) -> bool:
    return not await listing


async def _submit(anon, token: str) -> str:
    """A valid submission of alice's (retried while the service has not seen her
    server yet); the job's name."""
    async def accepted():
        answer = await _call(anon, "POST", BASE[JOBS] + JOBS_API_PATH, js(valid()),
                             _auth(token))
        assert answer.status in (201, 409, 503), answer  # not yet: no server seen, no watch
        return answer.status == 201 and json.loads(answer.text)["name"]

    return await wait_for(accepted, timeout=120, interval=1, what="alice's job to be accepted")


async def _states(anon, token: str) -> list[str]:
    answer = await _call(anon, "GET", BASE[JOBS] + JOBS_API_PATH, headers=_auth(token))
    return sorted(j["state"] for j in json.loads(answer.text)["jobs"]) if answer.status == 200 \
        else []


async def _scoped_tokens(anon, tokens: dict[str, str]) -> dict[str, str]:
    """alice's token with only ``read:users:name!user``; bob's revoked and expired ones."""
    api = f"{URL}/hub/api/users"

    async def new(user, body):
        answer = await _call(anon, "POST", f"{api}/{user}/tokens", js(body), _auth(tokens[user]))
        assert answer.status == 201, answer
        return json.loads(answer.text)

    name_only = await new("alice", {"scopes": ["read:users:name!user"], "expires_in": 3600})
    revoked = await new("bob", {"expires_in": 3600})
    answer = await _call(anon, "DELETE", f"{api}/bob/tokens/{revoked['id']}",
                         headers=_auth(tokens["bob"]))
    assert answer.status == 204, answer
    expired = await new("bob", {"expires_in": 1})
    await asyncio.sleep(2)
    return {"alice/name-only": name_only["token"], "revoked": revoked["token"],
            "expired": expired["token"]}


async def _set_up(http, tokens, kube, anon, log: Path) -> Hub:
    """alice and dave logged in (browser sessions), their servers running, alice's two
    jobs submitted (the second queued), the browsers signed in to both services."""
    cookies = {user: await _login_session(user) for user in ("alice", "dave")}
    for user in cookies:
        status, message = await hubrest.start(http, user, tokens[user], {"profile": "t4-shared"})
        assert status in (201, 202), message
    for user in cookies:
        await wait_for(lambda: _running(http, user, tokens[user]), timeout=180, interval=1,
                       what=f"{user}'s server")
    jobs = [await _submit(anon, tokens["alice"]) for _ in range(2)]
    await wait_for(lambda: _states_are(anon, tokens["alice"], ["queued", "running"]),
                   timeout=180, interval=1, what="alice's first job to run, her second to queue")
    for user, session in cookies.items():  # OAuth, as a browser does on its first visit
        for where, path in ((JOBS, JOBS_API_PATH), (USAGE, "")):
            async with session.get(BASE[where] + path) as r:
                assert r.status == 200, (user, where, r.status, await r.text())
    tokens = {**tokens, **await _scoped_tokens(anon, tokens),
              "alice/server": await _server_token(kube, "alice")}
    fill = {"alice_job": jobs[0], **{k: v for k, v in tokens.items() if "/" not in k}}
    return Hub(http, tokens, cookies, log, fill)


async def _states_are(anon, token, states) -> bool:
    return await _states(anon, token) == states


async def _send(hub: Hub, anon, case: Case) -> Answer:
    session = hub.cookies[case.who.split("/")[1]] if case.who.startswith("cookie/") else anon
    headers = {} if case.who == "nobody" or case.who.startswith("cookie/") \
        else _auth(hub.tokens[case.who])
    headers.update({k: v.format(**hub.fill) for k, v in case.headers})
    url = BASE[case.where] + case.path.format(**hub.fill)
    return await _call(session, case.method, url, case.body, headers, case.follow)


async def _undo(hub: Hub, anon, case: Case, answer: Answer) -> None:
    """A submission let through (a hub with a finding): cancel it, so that the next
    rows still see the user under their limit."""
    if not (case.method == "POST" and case.where == JOBS and answer.status == 201):
        return
    user = case.who.split("/")[-1]
    name = json.loads(answer.text)["name"]
    await _call(anon, "DELETE", f"{BASE[JOBS]}{JOBS_API_PATH}/{name}",
                headers=_auth(hub.tokens[user]))

    async def gone():
        listed = await _call(anon, "GET", BASE[JOBS] + JOBS_API_PATH,
                             headers=_auth(hub.tokens[user]))
        return name not in {j["name"] for j in json.loads(listed.text)["jobs"]}

    await wait_for(gone, timeout=120, interval=1, what=f"{name} (let through) to go")


def _wrong(case: Case, answer: Answer) -> str | None:
    """Why ``answer`` is not the refusal ``case`` must get (None: it is)."""
    if answer.status not in case.expect:
        return f"expected {sorted(case.expect)}, got {answer.status}: {answer.text[:300]!r}"
    if case.expect == LOGIN and "/hub/api/oauth2/authorize" not in answer.location:
        return f"a redirect elsewhere than the hub's login: {answer.location!r}"
    if len(answer.text) > MAX_ANSWER:
        return f"an answer of {len(answer.text)} characters (input echoed?)"
    leaked = [s for s in SECRETS if s in answer.text]
    return f"the answer holds {leaked}" if leaked else None


async def _controls(hub: Hub, anon) -> dict[str, Answer]:
    """Legitimate requests in the same window: each must be answered 200."""
    alice = _auth(hub.tokens["alice"])
    return {
        "alice lists her jobs": await _call(anon, "GET", BASE[JOBS] + JOBS_API_PATH,
                                            headers=alice),
        "alice's usage page": await _call(anon, "GET", BASE[USAGE], headers=alice),
        "the admin's CSV": await _call(anon, "GET", BASE[USAGE] + USAGE_CSV_PATH,
                                       headers=_auth(hub.tokens["admin"])),
    }


def _log_since(log: Path, offset: int) -> list[str]:
    with open(log, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()


async def test_hostile_requests_are_refused_and_write_nothing(hostile_hub, kube):
    http, tokens, log = hostile_hub
    audit = AuditLog(STATE_DIR)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as anon:
        hub = await _set_up(http, tokens, kube, anon, log)
        try:
            offset = log.stat().st_size
            start = await audit.fence(kube)
            wrong = {}
            for case in CASES:
                answer = await _send(hub, anon, case)
                if (why := _wrong(case, answer)) is not None:
                    wrong[case.id] = why
                await _undo(hub, anon, case, answer)
            over = [c for c in CASES if c.id == "over-limit-cpu-job"] * BURST
            burst = await asyncio.gather(*(_send(hub, anon, c) for c in over))
            for case, answer in zip(over, burst):
                await _undo(hub, anon, case, answer)
            controls = await _controls(hub, anon)
            end = await audit.fence(kube)
        finally:
            await hub.close(kube)
    requests = audit.between(start, end)

    # Every problem at once (a hub with findings shows each of them, not the first one)
    problems = {
        "rows not refused as they say": [f"{i}: {why}" for i, why in wrong.items()],
        "over-limit burst not all refused": [a.status for a in burst if a.status != 400],
        "writes of the hub (or a service of it)": [r for r in requests
                                                   if r.user == HUB_IDENTITY and r.is_write],
        "created by anyone": [r for r in requests
                              if r.verb == "create" and r.resource in CREATED],
        "the admin's CSV: cells a spreadsheet runs": _formulas(controls["the admin's CSV"].text),
        "alice's usage page: secrets": [s for s in SECRETS
                                        if s in controls["alice's usage page"].text],
        **_log_problems(_log_since(log, offset), log.read_text(errors="replace")),
    }
    print(f"{len(CASES) + BURST} hostile requests, through {BASE[JOBS]} and beside it:")
    for what, found in problems.items():
        print(f"{what}: {len(found)}", *(f"  {f}" for f in found), sep="\n")
    assert len(CASES) + BURST >= 200
    assert {c: a.status for c, a in controls.items()} == {c: 200 for c in controls}, controls
    jobs = json.loads(controls["alice lists her jobs"].text)["jobs"]
    assert jobs and {j["name"][:10] for j in jobs} == {"job-alice-"}, "no acceptance seen"
    assert not [what for what, found in problems.items() if found], problems


def _formulas(text: str) -> list[str]:
    """The CSV's cells a spreadsheet would run as a formula (issue #25's CSV finding)."""
    cells = [cell for row in csv.reader(io.StringIO(text)) for cell in row]
    assert cells[:4] == ["figure", "name", "measure", "value"], text[:200]
    return [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]


def _log_problems(window: list[str], whole: str) -> dict[str, list[str]]:
    """The hub's log (its services' too): lines forged by a field's newline, lines
    holding a huge input (both in the window), credentials (anywhere)."""
    return {
        "log: forged lines": [line for line in window
                              if line.startswith(FORGED_LINE.split()[0])],
        "log: over-long lines": [f"{line[:200]}... ({len(line)} characters)"
                                 for line in window if len(line) > MAX_LOG_LINE],
        "log: credentials": [s for s in SECRETS if s in whole],
    }
