"""``jupyterhub-gpu job`` against the service's real Tornado app, its users known through
JupyterHub's HubOAuth. Two stand-ins for what lives outside this package: a hub API that
answers ``GET /hub/api/user`` for a few tokens (as JupyterHub does: name, groups,
scopes), and watches holding objects shaped as the API server sends them. Nothing here
reaches Kubernetes: every request below is answered, or refused, from those."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from jupyterhub.services.auth import HubOAuth
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from jupyterhub_gpu import cli
from jupyterhub_gpu.contract import (COMPONENT_LABEL, ENV_API_TOKEN, ENV_JOBS_URL,
                                     JOB_COMPONENT, JOB_PROFILE_LABEL, JOB_UID_LABEL,
                                     JOBS_ACCESS_SCOPE, SINGLEUSER_COMPONENT, USERNAME_KEY)
from jupyterhub_gpu.jobs.cluster import Watches
from jupyterhub_gpu.jobs.cli import EXIT_MEANINGS, Exit
from jupyterhub_gpu.jobs.config import service_url
from jupyterhub_gpu.jobs.service import Jobs, make_app

USERS = {  # token -> the model JupyterHub's GET /hub/api/user answers
    "bob-token": {"kind": "user", "name": "bob", "groups": ["ml-eng"],
                  "scopes": [JOBS_ACCESS_SCOPE]},
    "carol-token": {"kind": "user", "name": "carol", "groups": ["ml-eng"],
                    "scopes": [JOBS_ACCESS_SCOPE]},
    "unscoped-token": {"kind": "user", "name": "bob", "groups": ["ml-eng"], "scopes": []},
    "dave-token": {"kind": "user", "name": "dave", "groups": ["ml-eng"],
                   "scopes": [JOBS_ACCESS_SCOPE]},
    "admin-token": {"kind": "user", "name": "root", "admin": True, "groups": [],
                    "scopes": [JOBS_ACCESS_SCOPE, "admin:users", "admin:servers"]},
    "service-token-of-usage": {"kind": "service", "name": "gpu-usage",
                               "scopes": [JOBS_ACCESS_SCOPE]},
    # a name that would forge a log line if logged as it is
    "mallory-token": {"kind": "user", "name": "mallory\n[W 2026 jobs] admin cancelled all",
                      "groups": ["ml-eng"], "scopes": [JOBS_ACCESS_SCOPE]},
}
NS = "jhub-ml-eng"


class HubUser(web.RequestHandler):
    def get(self):
        model = USERS.get(self.request.headers.get("Authorization", "").removeprefix("token "))
        if model is None:
            raise web.HTTPError(403)
        self.finish(json.dumps(model))


def _job(name: str, user: str, uid: str, **status) -> dict:
    return {"metadata": {"name": name, "namespace": NS, "uid": uid,
                         "creationTimestamp": f"2026-12-02T12:0{uid[-1]}:00Z",
                         "labels": {JOB_PROFILE_LABEL: "a100-train", COMPONENT_LABEL: JOB_COMPONENT},
                         "annotations": {USERNAME_KEY: user}},
            "spec": {"template": {"spec": {"containers": [{
                "name": "job", "image": "acr.io/nb:1", "command": ["python", "train.py"]}]}}},
            "status": status}


def _workload(uid: str) -> dict:
    return {"metadata": {"name": f"wl-{uid}", "namespace": NS, "uid": f"w{uid}",
                         "labels": {JOB_UID_LABEL: uid}},
            "spec": {"queueName": "ml-eng"},
            "status": {"admission": {"podSetAssignments": [{"flavors": {"cpu": "a100spot"}}]},
                       "conditions": [{"type": "QuotaReserved", "status": "True"}]}}


def _cluster(platform) -> Watches:
    """Watches holding: bob's job that succeeded, bob's running job, carol's job, and
    carol's running notebook."""
    watches = Watches(t.namespace for t in platform.teams)
    done = _job("job-bob-done", "bob", "u1", startTime="2026-12-02T12:01:00Z",
                completionTime="2026-12-02T12:31:00Z",
                conditions=[{"type": "Complete", "status": "True"}])
    running = _job("job-bob-run", "bob", "u2", startTime="2026-12-02T12:02:00Z")
    pod = {"metadata": {"name": "job-bob-run-x", "namespace": NS,
                        "labels": {"batch.kubernetes.io/job-name": "job-bob-run",
                                   COMPONENT_LABEL: JOB_COMPONENT}},
           "spec": {"nodeName": "aks-a100spot-1"}, "status": {"phase": "Running"}}
    notebook = {"metadata": {"name": "jupyter-carol", "namespace": NS,
                             "labels": {COMPONENT_LABEL: SINGLEUSER_COMPONENT},
                             "annotations": {USERNAME_KEY: "carol"}},
                "spec": {"containers": [{"image": "acr.io/nb:1"}]}, "status": {"phase": "Running"}}
    for ns in watches.namespaces:
        watches.jobs[ns] = SimpleNamespace(resources={})
        watches.pods[ns] = SimpleNamespace(resources={})
        watches.workloads[ns] = SimpleNamespace(resources={})
    watches.jobs[NS].resources = {f"{NS}/{j['metadata']['name']}": j for j in (
        done, running, _job("job-carol-1", "carol", "u3", startTime="2026-12-02T12:03:00Z"),
        _job("job-carol-2", "carol", "u4", startTime="2026-12-02T12:04:00Z"))}
    dave = {**notebook, "metadata": {**notebook["metadata"], "name": "jupyter-dave",
                                     "annotations": {USERNAME_KEY: "dave"}}}
    watches.pods[NS].resources = {"a": pod, "b": notebook, "c": dave}
    watches.workloads[NS].resources = {u: _workload(u) for u in ("u1", "u2", "u3", "u4")}
    watches.ready = True
    return watches


@pytest.fixture
def service(example_spec_path, platform, monkeypatch, tmp_path):
    """The service's app and the stand-in hub, on one port, in a thread of their own;
    the CLI's environment as a server's terminal has it. Yields the service's state,
    app and HubOAuth, and its URL."""
    loop = asyncio.new_event_loop()
    (sock,) = bind_sockets(0, "127.0.0.1", family=2)
    port = sock.getsockname()[1]
    prefix = "/services/gpu-jobs/"

    async def start():
        auth = HubOAuth(api_token="service-token", api_url=f"http://127.0.0.1:{port}/hub/api",
                        access_scopes={JOBS_ACCESS_SCOPE}, cache_max_age=0,
                        oauth_client_id="service-gpu-jobs", base_url=prefix)
        jobs = Jobs(str(example_spec_path), _cluster(platform))
        app = make_app(jobs, prefix, {}, auth)
        app.add_handlers(".*", [("/hub/api/user", HubUser)])
        server = HTTPServer(app)
        server.add_sockets([sock])
        return server, SimpleNamespace(jobs=jobs, app=app, auth=auth,
                                       url=service_url(f"http://127.0.0.1:{port}"))

    server, made = loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(ENV_JOBS_URL, made.url)
    monkeypatch.setenv(ENV_API_TOKEN, "bob-token")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield made
    loop.call_soon_threadsafe(server.stop)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["job", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_only_the_callers_jobs_in_words(service, capsys):
    code, out, _ = _run(capsys, "list")
    assert code == 0
    assert out.splitlines() == ["job-bob-done  a100-train  succeeded after 30 min",
                                "job-bob-run   a100-train  running on pool a100spot"]


def test_status_of_a_job(service, capsys):
    code, out, _ = _run(capsys, "status", "job-bob-run")
    assert code == 0 and "status:    running on pool a100spot" in out
    assert "command:   python train.py" in out and "namespace: jhub-ml-eng" in out


def test_another_users_job_is_not_there(service, capsys):
    for command in ("status", "cancel", "logs"):
        code, _, err = _run(capsys, command, "job-carol-1")
        assert code == Exit.REFUSED == 1
        assert err == "error: You have no job 'job-carol-1'. (HTTP 404)\n"


def test_refusals_say_why_and_are_logged(service, capsys, caplog, monkeypatch):
    caplog.set_level(logging.WARNING, "jupyterhub_gpu.jobs")
    Path("train.py").write_text("")
    code, _, err = _run(capsys, "submit", "train.py", "--profile", "t4-dev-nope")
    assert code == 1 and "Unknown job profile 't4-dev-nope'" in err and "(HTTP 400)" in err
    assert "Refused job of user bob: unknown job profile 't4-dev-nope'" in caplog.text
    code, _, err = _run(capsys, "submit", "train.py", "--profile", "a100-train")
    assert code == 1 and "Start your server first" in err and "(HTTP 409)" in err
    monkeypatch.setenv(ENV_API_TOKEN, "carol-token")  # two jobs not finished: the limit
    code, _, err = _run(capsys, "submit", "train.py", "--profile", "a100-train", "--", "-x")
    assert code == 1 and "2 job(s) queued or running" in err
    assert "Refused job of user carol: over the limit: 2 active of 2" in caplog.text


def test_a_script_outside_the_home_is_refused_before_asking(service, capsys):
    code, _, err = _run(capsys, "submit", "/etc/passwd", "--profile", "a100-train")
    assert code == 1 and "/etc/passwd is not in your home directory" in err


def test_a_job_name_is_one_path_segment_of_the_url(service, capsys):
    """A name holding "/" is not read as another of the service's paths (here, the
    running job's log: status would follow it)."""
    for command in ("status", "cancel"):
        code, _, err = _run(capsys, command, "job-bob-run/logs")
        assert code == 1 and "(HTTP 404)" in err, err


def test_logs_of_a_job_without_a_pod_on_a_node(service, capsys, monkeypatch):
    monkeypatch.setenv(ENV_API_TOKEN, "carol-token")
    code, _, err = _run(capsys, "logs", "job-carol-1")
    assert code == 1 and "has no pod on a node yet" in err and "(HTTP 404)" in err


def test_a_token_without_the_scope_or_no_token(service, capsys, monkeypatch):
    monkeypatch.setenv(ENV_API_TOKEN, "unscoped-token")
    code, _, err = _run(capsys, "list")
    assert code == 1 and "(HTTP 403)" in err
    monkeypatch.setenv(ENV_API_TOKEN, "forged")
    code, _, err = _run(capsys, "list")
    assert code == 1 and "does not know this token" in err and "(HTTP 403)" in err
    monkeypatch.delenv(ENV_API_TOKEN)
    code, _, err = _run(capsys, "list")
    assert code == Exit.NOT_SET_UP == 5 and "JUPYTERHUB_API_TOKEN is not set" in err


def test_no_service_url(capsys, monkeypatch):
    monkeypatch.delenv(ENV_JOBS_URL, raising=False)
    code, _, err = _run(capsys, "list")
    assert code == Exit.NOT_SET_UP == 5 and "JUPYTERHUB_GPU_JOBS_URL is not set" in err


def test_a_service_that_cannot_be_reached_is_not_a_usage_error(capsys, monkeypatch):
    """Nothing listens on the port: exit 3, not argparse's 2."""
    (sock,) = bind_sockets(0, "127.0.0.1", family=2)
    port = sock.getsockname()[1]
    sock.close()
    monkeypatch.setenv(ENV_API_TOKEN, "bob-token")
    code, _, err = _run(capsys, "--url", service_url(f"http://127.0.0.1:{port}"), "list")
    assert code == Exit.UNREACHABLE == 3
    assert err.startswith("error: cannot reach the jobs service at http://127.0.0.1:")


def test_a_wrong_command_line_is_exit_2(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["job", "submit", "train.py"])  # no --profile
    assert exited.value.code == Exit.USAGE == 2
    assert "the following arguments are required: --profile" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["submit"], ["list"], ["status"], ["logs"],
                                     ["cancel"]])
def test_help_lists_every_exit_status(capsys, command):
    with pytest.raises(SystemExit) as exited:
        cli.main(["job", *command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    listed = out[out.index("\nexit status:\n"):].splitlines()[2:]
    assert [line[:5] for line in listed if not line.startswith("     ")] == [
        f"  {int(code)}  " for code in Exit]
    assert " ".join(line.strip() for line in listed) == " ".join(
        f"{int(code)}  {what}" for code, what in EXIT_MEANINGS.items())


def test_the_user_guide_lists_the_exit_statuses_as_help_does(repo_root):
    guide = (repo_root / "docs/user-guide.md").read_text()
    table = guide[guide.index("| exit status | meaning |"):].split("\n\n")[0].splitlines()[2:]
    assert table == [f"| {int(code)} | {what} |" for code, what in EXIT_MEANINGS.items()]


def test_the_scripts_own_options_after_the_separator():
    argv, script_args = cli.split_script_args(
        ["job", "submit", "t.py", "--profile", "p", "--", "--lr", "0.1", "--", "x"])
    assert argv == ["job", "submit", "t.py", "--profile", "p"]
    assert script_args == ["--lr", "0.1", "--", "x"]
    assert cli.split_script_args(["render", "--", "x"]) == (["render", "--", "x"], [])


def test_before_the_watches_run_the_service_says_so(service, capsys):
    service.jobs.watches.ready = False  # e.g. the hub's Role does not let it list Workloads yet
    code, _, err = _run(capsys, "list")
    assert code == Exit.SERVICE_ERROR == 4
    assert "cannot read the cluster yet" in err and "(HTTP 503)" in err
