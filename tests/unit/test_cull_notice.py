"""What the user sees before a cull: the toast text, the server extension in a real
Jupyter server, and the warning in a real kernel's cell output."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import pytest

from jupyterhub_gpu.cull import notice
from jupyterhub_gpu.cull.kernel_ext import DeadlineWarner
from jupyterhub_gpu.cull.notice import CullRules, deadline_warning, notice_message
from jupyterhub_gpu.spec.model import GpuIdle

from .. import jupyter_server

NOW = datetime(2025, 3, 4, 12, 0, tzinfo=timezone.utc)
ETC = Path(notice.__file__).parent / "etc"
MIG = CullRules("a100-mig-3g", 1800, 12 * 3600, NOW + timedelta(hours=11, minutes=30),
                GpuIdle(5.0, 1800))


def test_pod_env_round_trips_into_the_rules(platform):
    profile = platform.profile("a100-mig-3g")
    started = datetime(2025, 3, 4, 0, 30)  # the hub's naive UTC
    env = {"JUPYTERHUB_GPU_PROFILE": "a100-mig-3g", **notice.pod_env(profile),
           **notice.deadline_env(profile, started)}
    assert env == {"JUPYTERHUB_GPU_PROFILE": "a100-mig-3g",
                   "JUPYTERHUB_GPU_IDLE_TIMEOUT": "1800", "JUPYTERHUB_GPU_MAX_AGE": "43200",
                   "JUPYTERHUB_GPU_IDLE_GPU_THRESHOLD": "5",
                   "JUPYTERHUB_GPU_IDLE_GPU_WINDOW": "1800",
                   "JUPYTERHUB_GPU_MAX_AGE_DEADLINE": "2025-03-04T12:30:00+00:00"}
    assert CullRules.from_env(env) == CullRules(
        "a100-mig-3g", 1800, 43200, datetime(2025, 3, 4, 12, 30, tzinfo=timezone.utc),
        GpuIdle(5.0, 1800))
    training = notice.pod_env(platform.profile("a100-training"))
    assert training["JUPYTERHUB_GPU_GRACE_SECONDS"] == "25"
    assert notice.deadline_env(platform.profile("t4-shared"), started) == {}
    assert CullRules.from_env({}) is None  # not a GPU server


def test_toast_states_the_rules_and_fits_jupyterlab():
    text = notice_message(MIG, NOW)
    assert text == ("This server stops at 23:30 UTC (12h limit), after 30m idle or after "
                    "30m with GPU <5% even if busy. Save work: jupyterhub_gpu.checkpoint")
    assert len(text) <= notice.TOAST_LIMIT


def test_toast_leads_with_a_checkpoint_problem_and_drops_what_does_not_fit():
    text = notice_message(MIG, NOW, "checkpoint directory /ck is not writable: Read-only "
                          "file system")
    assert text.startswith("Checkpoints will fail: checkpoint directory /ck is not writable")
    assert len(text) <= notice.TOAST_LIMIT


def test_toast_for_a_profile_without_max_age_or_gpu_rule():
    rules = CullRules("t4-shared", 1800)
    assert notice_message(rules, NOW) == ("This server stops after 30m idle. "
                                          "Save work: jupyterhub_gpu.checkpoint")


def test_far_deadlines_show_the_date():
    rules = CullRules("a100-training", 1800, 86400, NOW + timedelta(hours=23))
    assert "at Mar 05 11:00 UTC (24h limit)" in notice_message(rules, NOW)


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_kernel_warning_only_near_the_hard_stop_and_not_every_cell():
    clock = Clock(NOW + timedelta(hours=11))
    warner = DeadlineWarner(MIG, timedelta(minutes=15), clock)
    assert warner.message() is None  # 30 minutes left
    clock.now = NOW + timedelta(hours=11, minutes=21)
    assert warner.message() == (
        "jupyterhub-gpu: this server will be stopped at 23:30 UTC, in 9m (its 12h limit). "
        "Save your work now, e.g. jupyterhub_gpu.checkpoint.save(obj, 'name').")
    clock.now += timedelta(minutes=2)
    assert warner.message() is None  # shown 2 minutes ago
    clock.now = NOW + timedelta(hours=11, minutes=29, seconds=30)
    assert "in 30s" in warner.message()
    assert deadline_warning(CullRules("t4", 1800), NOW, timedelta(hours=1)) is None


def test_status_uses_the_cullers_decision():
    status = notice.status(MIG, NOW, NOW - timedelta(minutes=10))
    assert status["next_cull"] == "2025-03-04T12:20:00+00:00"
    assert status["next_reason"] == "idle" and status["cull_due"] is False
    late = notice.status(MIG, NOW + timedelta(hours=11, minutes=30), NOW + timedelta(hours=11))
    assert late["cull_due"] is True and late["next_reason"] == "max-age"


# -- a real Jupyter server with the extension, JupyterLab and the shipped config --------

@pytest.fixture
async def jupyter(tmp_path):
    config = tmp_path / "etc-jupyter"
    shutil.copytree(ETC / "jupyter_server_config.d", config / "jupyter_server_config.d")
    settings = tmp_path / "lab-settings"
    shutil.copytree(ETC / "lab_settings_overrides.d", settings / "overrides.d")
    deadline = datetime.now(timezone.utc) + timedelta(hours=11, minutes=30)
    token = "test-token"
    env = {"JUPYTER_CONFIG_PATH": str(config),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERHUB_GPU_PROFILE": "a100-mig-3g", "JUPYTERHUB_GPU_IDLE_TIMEOUT": "1800",
           "JUPYTERHUB_GPU_MAX_AGE": "43200",
           "JUPYTERHUB_GPU_MAX_AGE_DEADLINE": deadline.isoformat(timespec="seconds"),
           "JUPYTERHUB_GPU_IDLE_GPU_THRESHOLD": "5", "JUPYTERHUB_GPU_IDLE_GPU_WINDOW": "1800",
           "CHECKPOINT_DIR": str(tmp_path / "checkpoints")}
    proc, base = jupyter_server.start(env, tmp_path, settings, token)
    async with aiohttp.ClientSession(headers={"Authorization": f"token {token}"},
                                     timeout=aiohttp.ClientTimeout(total=20)) as http:
        await jupyter_server.wait_up(http, proc, base)
        yield http, base, deadline
    proc.terminate()
    log = proc.communicate(timeout=20)[1]
    assert "jupyterhub-gpu: This server stops at" in log


async def test_jupyterlab_update_check_shows_the_cull_rules(jupyter):
    http, base, deadline = jupyter
    async with http.get(f"{base}/lab/api/update") as r:
        notification = (await r.json())["notification"]
    assert notification["type"] == "info"
    assert notification["message"] == (
        f"This server stops at {deadline:%H:%M} UTC (12h limit), after 30m idle or "
        "after 30m with GPU <5% even if busy. Save work: jupyterhub_gpu.checkpoint")
    async with http.get(f"{base}/lab/api/settings/@jupyterlab/apputils-extension:"
                        "notification") as r:
        defaults = (await r.json())["schema"]["properties"]
    # JupyterLab only runs the update check once fetchNews is answered (default "none")
    assert defaults["fetchNews"]["default"] == "false"
    assert defaults["checkForUpdates"]["default"] is True


async def test_status_api_reports_the_deadlines(jupyter):
    http, base, deadline = jupyter
    async with http.get(f"{base}/jupyterhub-gpu/api/cull") as r:
        assert r.status == 200
        status = await r.json()
    assert status["profile"] == "a100-mig-3g" and status["next_reason"] == "idle"
    last = datetime.fromisoformat(status["last_activity"])
    assert abs((datetime.now(timezone.utc) - last).total_seconds()) < 60
    assert datetime.fromisoformat(status["next_cull"]) == last.replace(microsecond=0) + \
        timedelta(minutes=30)
    assert status["max_age_deadline"] == deadline.isoformat(timespec="seconds")
    assert status["checkpoint_problem"] is None
    # asking is not activity. The API gives whole seconds: once the clock is past the
    # reported second, any activity would show as a later one
    while datetime.now(timezone.utc) < last + timedelta(seconds=1):
        await asyncio.sleep(0.05)

    async def last_activity():
        async with http.get(f"{base}/jupyterhub-gpu/api/cull") as r:
            return (await r.json())["last_activity"]

    assert [await last_activity(), await last_activity()] == [status["last_activity"]] * 2
    async with http.get(f"{base}/api/contents") as r:  # real activity (the control)
        assert r.status == 200
    assert datetime.fromisoformat(await last_activity()) > last
    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.get(f"{base}/jupyterhub-gpu/api/cull") as r:
            assert r.status == 403


async def test_lab_notice_names_an_unwritable_checkpoint_dir(monkeypatch):
    import tempfile

    from jupyterhub_gpu.cull.lab_notice import CullNotice

    # a short path: the notice has a length limit, which a long one (a pytest-xdist
    # worker's tmp_path) would meet, and the message is cut there
    with tempfile.TemporaryDirectory(prefix="ck-") as short:
        (Path(short) / "file").write_text("")
        monkeypatch.setenv("CHECKPOINT_DIR", f"{short}/file/checkpoints")
        monkeypatch.setenv("JUPYTERHUB_GPU_IDLE_TIMEOUT", "1800")
        message = await CullNotice("4.0.0")()
    assert message.startswith(f"Checkpoints will fail: checkpoint directory "
                              f"{short}/file/checkpoints is not writable")
    monkeypatch.delenv("JUPYTERHUB_GPU_IDLE_TIMEOUT")
    monkeypatch.delenv("CHECKPOINT_DIR")
    assert await CullNotice("4.0.0")() is None  # not a GPU server: no toast


# -- a real IPython kernel with the shipped kernel config --------------------------------

def test_kernel_warns_in_cell_output_before_the_hard_stop(tmp_path):
    from jupyter_client.manager import start_new_kernel

    ipython_dir = tmp_path / "ipython"
    (ipython_dir / "profile_default").mkdir(parents=True)
    shutil.copy(ETC / "ipython" / "ipython_kernel_config.json", ipython_dir / "profile_default")
    deadline = datetime.now(timezone.utc) + timedelta(minutes=10)
    env = {**os.environ, "IPYTHONDIR": str(ipython_dir), "JUPYTERHUB_GPU_IDLE_TIMEOUT": "1800",
           "JUPYTERHUB_GPU_MAX_AGE": "28800",
           "JUPYTERHUB_GPU_MAX_AGE_DEADLINE": deadline.isoformat(timespec="seconds")}
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path))
    try:
        def run(code: str) -> str:
            out: list[str] = []
            kc.execute_interactive(code, timeout=30, output_hook=lambda m: out.append(
                m["content"]["text"]) if m["msg_type"] == "stream" else None)
            return "".join(out)

        first = run("print('hello')")
        assert "this server will be stopped at" in first and "(its 8h limit)" in first
        assert first.endswith("hello\n")
        assert run("print('again')") == "again\n"  # not repeated within 5 minutes
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_pod_side_modules_need_none_of_the_hub_side_packages():
    """Notebook images have jupyter_server and JupyterLab, not the culler's deps."""
    code = textwrap.dedent("""
        import sys
        BLOCKED = {"kubespawner", "jupyterhub", "aiohttp", "jupyterhub_idle_culler",
                   "kubernetes_asyncio", "kubernetes"}

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"blocked: {name}")

        sys.meta_path.insert(0, Block())
        import jupyterhub_gpu.checkpoint, jupyterhub_gpu.cull.kernel_ext
        import jupyterhub_gpu.cull.lab_notice, jupyterhub_gpu.cull.server_ext
        import jupyterhub_gpu.labext.handler, jupyterhub_gpu.labext.dcgm
        print("ok")
        """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
    assert child.stdout == "ok\n", child.stderr
