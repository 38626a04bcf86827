"""The gpu-jobs service's guards, against its real Tornado app and JupyterHub's
HubOAuth (the stand-in hub and watches of :mod:`.test_job_cli`): who a request is
answered as (token or browser cookie, and XSRF), the bounds of a request and of a
followed log, the per-user limit while the Job watch lags, and what its log lines
show. Where a request would reach Kubernetes, a stand-in records what the API server
was asked (the cluster tier does it for real: tests/integration/test_job_service.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from http.cookies import SimpleCookie

import pytest
from tornado import web

from jupyterhub_gpu.contract import JOB_PROFILE_LABEL
from jupyterhub_gpu.jobs import cluster, service as jobs_service
from jupyterhub_gpu.jobs.request import MAX_BODY_BYTES

from .test_job_cli import NS

GOOD = {"profile": "a100-train", "script": "train.py"}


def _call(url: str, method: str = "GET", body: bytes | None = None,
          headers: dict | None = None) -> tuple[int, str, dict]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def _api(service, path: str = "") -> str:
    return service.url + "api/jobs" + path


def _oauth_cookie(service, token: str) -> str:
    """The cookie HubOAuth sets after a browser's OAuth login (its signed token)."""
    value = web.create_signed_value(service.app.settings["cookie_secret"],
                                    service.auth.cookie_name, token).decode()
    return f"{service.auth.cookie_name}={value}"


@pytest.fixture
def kube(monkeypatch):
    """The API server's writes, recorded; the Job watch never shows the new Jobs."""
    made: list[dict] = []

    async def create(job, service_, policy=None):
        job = json.loads(json.dumps(job))
        job["metadata"]["uid"] = f"uid-{len(made)}"
        made.append(job)
        return job

    async def delete(job):
        made.append({"deleted": job["metadata"]["name"]})

    monkeypatch.setattr(cluster, "create", create)
    monkeypatch.setattr(cluster, "delete", delete)
    monkeypatch.setattr(cluster, "SEEN_TIMEOUT", 0.05)
    return made


def test_a_cookie_never_stands_in_for_an_unknown_token(service, kube):
    """A same-origin page (another user's server) sends the victim's OAuth cookie with
    ``Authorization: token x``: refused, on every method, and nothing is written."""
    carol = {"Cookie": _oauth_cookie(service, "carol-token"), "Sec-Fetch-Mode": "cors",
             "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}
    for token in ("token x", "token ", "Bearer nope", "Basic Y2Fyb2w6eA=="):
        forged = {**carol, "Authorization": token}
        for method, path, body in (("POST", "", json.dumps(GOOD).encode()),
                                   ("DELETE", "/job-carol-1", None), ("GET", "", None)):
            status, text, _ = _call(_api(service, path), method, body, forged)
            assert status == 403 and "does not know this token" in text, (token, method)
        forged["X-XSRFToken"] = "forged"
        assert _call(_api(service), "POST", json.dumps(GOOD).encode(), forged)[0] == 403
    assert kube == []


def test_a_browsers_write_needs_the_xsrf_token_a_page_view_gave_it(service, kube):
    cookie = _oauth_cookie(service, "dave-token")
    write = {"Cookie": cookie, "Sec-Fetch-Mode": "cors", "Sec-Fetch-Site": "same-origin",
             "Content-Type": "application/json"}
    status, _, _ = _call(_api(service), "POST", json.dumps(GOOD).encode(), write)
    assert status == 403 and kube == [], "no XSRF token: no write"
    status, text, headers = _call(_api(service), headers={"Cookie": cookie,
                                                          "Sec-Fetch-Mode": "navigate"})
    assert status == 200 and json.loads(text) == {"jobs": []}
    xsrf = SimpleCookie(headers["Set-Cookie"])["_xsrf"]
    assert xsrf["path"] == service.auth.base_url
    write.update({"Cookie": f"{cookie}; _xsrf={xsrf.value}", "X-XSRFToken": xsrf.value})
    status, text, _ = _call(_api(service), "POST", json.dumps(GOOD).encode(), write)
    assert status == 201 and json.loads(text)["command"] == ["python", "train.py"], text
    assert len(kube) == 1


def test_a_valid_token_needs_no_xsrf(service, kube):
    headers = {"Authorization": "token dave-token", "Cookie": _oauth_cookie(service, "carol-token"),
               "Content-Type": "application/json"}
    status, text, _ = _call(_api(service), "POST", json.dumps(GOOD).encode(), headers)
    assert status == 201 and kube[0]["metadata"]["annotations"] == {
        "hub.jupyter.org/username": "dave"}, text


def _submit(service, body) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, text, _ = _call(_api(service), "POST", data, {"Authorization": "token dave-token"})
    return status, json.loads(text)


def test_the_limit_holds_while_the_job_watch_lags(service, kube):
    """The watch has not shown the Jobs just created (for longer than the service waits
    for it): the limit (2) still counts them; once the watch shows them they are
    counted once, and once they finish, no more."""
    answers = [_submit(service, GOOD)[0] for _ in range(5)]
    assert answers == [201, 201, 400, 400, 400] and len(kube) == 2
    status, said = _submit(service, GOOD)
    assert "2 job(s) queued or running" in said["error"]
    jobs = service.jobs.watches.jobs[NS].resources
    for job in kube:  # the watch catches up
        job["metadata"]["labels"][JOB_PROFILE_LABEL] = "a100-train"
        jobs[f"{NS}/{job['metadata']['name']}"] = job
    assert service.jobs.active_count("dave") == 2
    assert _submit(service, GOOD)[0] == 400
    for job in kube:
        job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert service.jobs.active_count("dave") == 0
    assert _submit(service, GOOD)[0] == 201


def test_the_request_body_is_bounded(service, kube):
    big = {**GOOD, "args": ["x" * MAX_BODY_BYTES]}
    status, said = _submit(service, big)
    assert status == 413 and f"at most {MAX_BODY_BYTES} bytes" in said["error"]
    status, said = _submit(service, {**GOOD, "args": ["x" * (5 * 2**20)]})
    assert status in (400, 413) and kube == []
    for body in (b"[" * 100_000, b'{"profile": ' + b"[" * 50_000, b"\xff\xfe", b""):
        status, said = _submit(service, body)
        assert status == 400 and "must be a JSON object" in said["error"], body[:20]


def test_log_lines_escape_user_input_and_hold_no_argument(service, kube, caplog):
    caplog.set_level(logging.INFO, "jupyterhub_gpu.jobs")
    _call(_api(service), "POST", json.dumps({**GOOD, "profile": "x\n[I] forged"}).encode(),
          {"Authorization": "token mallory-token"})
    status, _ = _submit(service, {**GOOD, "args": ["--password", "s3cret-value"]})
    assert status == 201
    lines = [r.getMessage() for r in caplog.records]
    assert all("\n" not in line for line in lines), lines
    refused = next(line for line in lines if line.startswith("Refused job"))
    assert refused.startswith("Refused job of user mallory\\n[W 2026 jobs] admin")
    submitted = next(line for line in lines if "submitted job" in line)
    assert "python train.py with 2 argument(s) of 22 bytes" in submitted
    assert "s3cret" not in caplog.text


def _stand_in_kubelet(monkeypatch, chunks: int, size: int, pause: float = 0.0) -> None:
    async def log_chunks(pod):
        for _ in range(chunks):
            yield b"x" * (size - 1) + b"\n"
            await asyncio.sleep(pause)

    monkeypatch.setattr(cluster, "log_chunks", log_chunks)


def test_a_followed_log_stops_at_its_size_limit_and_says_so(service, monkeypatch):
    _stand_in_kubelet(monkeypatch, chunks=20, size=2**20)
    status, text, _ = _call(_api(service, "/job-bob-run/logs"),
                            headers={"Authorization": "token bob-token"})
    body, _, note = text.rpartition("\n[gpu-jobs: ")
    assert status == 200 and len(body) == jobs_service.MAX_LOG_BYTES < 20 * 2**20
    assert note.startswith(f"stopped following this log after {jobs_service.MAX_LOG_BYTES} "
                           "bytes"), note


def test_a_followed_log_stops_at_its_time_limit_and_says_so(service, monkeypatch):
    monkeypatch.setattr(jobs_service, "MAX_LOG_SECONDS", 1.0)
    _stand_in_kubelet(monkeypatch, chunks=400, size=10, pause=0.05)
    status, text, _ = _call(_api(service, "/job-bob-run/logs"),
                            headers={"Authorization": "token bob-token"})
    assert status == 200 and text.count("x" * 9) < 400
    assert text.endswith("stopped following this log after 1 seconds, the most one request "
                         "follows; ask again for the log from its start]\n"), text[-200:]


def test_a_log_that_ends_has_no_note(service, monkeypatch):
    _stand_in_kubelet(monkeypatch, chunks=3, size=10)
    status, text, _ = _call(_api(service, "/job-bob-run/logs"),
                            headers={"Authorization": "token bob-token"})
    assert (status, text) == (200, ("x" * 9 + "\n") * 3)


def test_no_admin_or_service_path_reaches_another_users_jobs(service, kube):
    """The service has no lead or admin view: a hub admin sees and touches only their
    own jobs (none), and a service's token is no user's."""
    admin = {"Authorization": "token admin-token"}
    assert json.loads(_call(_api(service), headers=admin)[1]) == {"jobs": []}
    for method, path in (("GET", "/job-bob-run"), ("DELETE", "/job-bob-run"),
                         ("GET", "/job-bob-run/logs")):
        status, text, _ = _call(_api(service, path), method, headers=admin)
        assert status == 404 and "You have no job 'job-bob-run'" in text
    status, text, _ = _call(_api(service), headers={"Authorization": "token "
                                                    "service-token-of-usage"})
    assert status == 403 and "Only users have jobs" in text
    assert kube == []


def test_a_refusal_with_a_percent_sign_is_logged_and_answered_whole(service, kube,
                                                                    caplog):
    """User input in a refusal is tornado's argument, never its log format: a ``%`` in
    it neither breaks the warning tornado logs nor the answer."""
    with caplog.at_level("WARNING", logger="tornado.general"):
        status, said = _submit(service, {**GOOD, "profile": "x%s%d%(y)s"})
    assert status == 400 and "'x%s%d%(y)s'" in said["error"]
    warned = [r.getMessage() for r in caplog.records if r.name == "tornado.general"]
    assert any("'x%s%d%(y)s'" in m for m in warned), warned
    assert kube == []
