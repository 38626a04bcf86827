"""jupyterhub_gpu.checkpoint: atomic saves, resume, SIGTERM in real processes, torn
writes under SIGKILL, the preStop hook, and an unwritable directory reported early."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jupyterhub_gpu import checkpoint


@pytest.fixture
def env(tmp_path, monkeypatch):
    """CHECKPOINT_DIR and the run dir in tmp, for this process and its children."""
    values = {"CHECKPOINT_DIR": str(tmp_path / "ckpt"),
              "JUPYTERHUB_GPU_RUN_DIR": str(tmp_path / "run"),
              "JUPYTERHUB_GPU_GRACE_SECONDS": "10"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return {**os.environ, **values}


def spawn(code: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_line(proc: subprocess.Popen, expected: str) -> None:
    line = proc.stdout.readline().strip()
    if line != expected:
        proc.kill()
        raise AssertionError(f"child said {line!r}: {proc.communicate()[1]}")


# -- save and resume ---------------------------------------------------------------------

def test_save_and_latest_round_trip_objects_and_bytes(env):
    assert checkpoint.latest("train") is None
    assert checkpoint.latest("train", default={"step": 0}) == {"step": 0}
    path = checkpoint.save({"step": 7, "loss": 0.25}, "train")
    assert path.parent == Path(env["CHECKPOINT_DIR"]) / "train"
    assert checkpoint.latest("train") == {"step": 7, "loss": 0.25}
    checkpoint.save(b"\x00raw", "weights")
    assert checkpoint.latest("weights") == b"\x00raw"
    assert checkpoint.latest_path("train") == path


def test_only_the_newest_are_kept(env):
    paths = [checkpoint.save({"step": i}, "train", keep=2) for i in range(4)]
    assert checkpoint.latest("train") == {"step": 3}
    assert sorted(p.name for p in paths[0].parent.glob("*.ckpt")) == [
        paths[2].name, paths[3].name]
    manifest = json.loads((paths[0].parent / "MANIFEST.json").read_text())
    assert [e["seq"] for e in manifest["entries"]] == [3, 4]


def test_a_damaged_newest_file_falls_back_to_the_previous_one(env):
    checkpoint.save({"step": 1}, "train")
    newest = checkpoint.save({"step": 2}, "train")
    data = bytearray(newest.read_bytes())
    data[-2] ^= 0xFF  # a flipped byte on disk
    newest.write_bytes(bytes(data))
    assert checkpoint.latest("train") == {"step": 1}


def test_unreadable_manifest_means_no_checkpoint_with_a_warning(env):
    checkpoint.save({"step": 1}, "train")
    (Path(env["CHECKPOINT_DIR"]) / "train" / "MANIFEST.json").write_text("{")
    with pytest.warns(UserWarning, match="unreadable checkpoint manifest"):
        assert checkpoint.latest("train") is None


@pytest.mark.parametrize("name", ["", "../escape", "a/b", ".hidden", "x" * 101])
def test_names_cannot_escape_the_directory(env, name):
    with pytest.raises(ValueError, match="checkpoint name"):
        checkpoint.save(b"x", name)


def test_a_save_killed_mid_write_is_never_returned(env):
    child = spawn("""
        import time
        from jupyterhub_gpu import checkpoint
        checkpoint.save({"step": 1}, "train")

        class SlowToPickle:
            def __reduce__(self):  # runs after the big chunk is on disk
                print("half-written", flush=True)
                time.sleep(60)
                return (int, (0,))

        checkpoint.save([b"x" * 20_000_000, SlowToPickle()], "train")
        """, env)
    wait_for_line(child, "half-written")
    folder = Path(env["CHECKPOINT_DIR"]) / "train"
    (partial,) = folder.glob("*.tmp")
    assert partial.stat().st_size > 10_000_000  # the crash really is mid-write
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert checkpoint.latest("train") == {"step": 1}
    checkpoint.save({"step": 2}, "train")  # the next save is unaffected
    assert checkpoint.latest("train") == {"step": 2}


# -- SIGTERM -----------------------------------------------------------------------------

def training(setup: str = "") -> str:
    """A training loop that saves its state on SIGTERM, after ``setup``."""
    head = """
        import time
        from jupyterhub_gpu import checkpoint
        state = {"step": 0}
        """
    loop = """
        @checkpoint.register
        def on_stop():
            checkpoint.save(state, "train")

        while True:
            state["step"] += 1
            if state["step"] == 1:  # a SIGTERM from now on saves some progress
                print("ready", flush=True)
            time.sleep(0.01)
        """
    return textwrap.dedent(head) + textwrap.dedent(setup) + textwrap.dedent(loop)


def test_sigterm_saves_then_the_process_exits(env):
    child = spawn(training(), env)
    wait_for_line(child, "ready")
    pid_file = Path(env["JUPYTERHUB_GPU_RUN_DIR"]) / "checkpoint-pids" / str(child.pid)
    assert pid_file.exists()
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=10)
    assert child.returncode == -signal.SIGTERM, err
    assert checkpoint.latest("train")["step"] > 0
    assert "SIGTERM: running 1 checkpoint callback(s), 8s of grace" in err
    assert not pid_file.exists()


def test_a_released_kernels_callbacks_run_once_within_their_budget_then_sigterm_exits(env):
    """What a GPU kernel's server runs in it before releasing it (``release_code``):
    the callbacks, those that would start past the budget skipped; a SIGTERM after
    that (its pod's deletion) runs none again, and the process exits as SIGTERM would."""
    child = spawn(f"""
        import time
        from jupyterhub_gpu import checkpoint
        for n in (1, 2):
            checkpoint.register(lambda n=n: (print("saved", n, flush=True), time.sleep(1.5)))
        print("ran", eval({checkpoint.release_code(1)!r}), flush=True)
        print("ran", checkpoint.run_callbacks(60, "again"), flush=True)
        time.sleep(60)
        """, env)
    for line in ("saved 1", "ran 1", "ran 0"):
        wait_for_line(child, line)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=10)
    assert child.returncode == -signal.SIGTERM, err
    assert out == "" and "GPU kernel released: running 2 checkpoint callback(s), 1s" in err
    assert "no grace left, skipped" in err and "SIGTERM" not in err


def test_code_run_where_this_module_was_never_imported_runs_nothing_and_imports_nothing():
    code = checkpoint.release_code(5)
    result = subprocess.run(
        [sys.executable, "-c",
         f"import sys; print(eval({code!r}), 'jupyterhub_gpu.checkpoint' in sys.modules)"],
        capture_output=True, text=True, timeout=60)
    assert result.stdout == "0 False\n", result.stderr


def test_a_failing_callback_does_not_stop_the_others_and_handlers_chain(env):
    setup = """
    import signal, sys
    signal.signal(signal.SIGTERM, lambda *a: (print("own handler", flush=True), sys.exit(3)))

    @checkpoint.register
    def broken():
        raise RuntimeError("disk full")
    """
    child = spawn(training(setup), env)
    wait_for_line(child, "ready")
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=10)
    assert child.returncode == 3 and "own handler" in out
    assert "RuntimeError: disk full" in err
    assert checkpoint.latest("train") is not None


def _path_with_python(tmp_path: Path, python: str) -> str:
    """A PATH whose ``python`` is ``python`` (as a notebook image's would be)."""
    bin_dir = tmp_path / "image-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {python} "$@"\n')
    (bin_dir / "python").chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def run_prestop_hook(tmp_path: Path, env: dict,
                     python: str) -> tuple[subprocess.CompletedProcess, Path]:
    """The pod's preStop command, as the kubelet runs it, in the image's working dir."""
    log = tmp_path / "termination-log"
    command = checkpoint.prestop_command(str(log))
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)  # not the checkout: its jupyterhub_gpu/ would be importable
    hook = subprocess.run(list(command), cwd=home, capture_output=True, text=True,
                          env={**env, "PATH": _path_with_python(tmp_path, python)}, timeout=30)
    return hook, log


def test_prestop_signals_registered_processes_and_returns_once_they_saved(env, tmp_path):
    env = {**env, "JUPYTERHUB_GPU_GRACE_SECONDS": "3600"}  # far longer than the hook's timeout
    child = spawn(training(), env)
    wait_for_line(child, "ready")
    bystander = spawn("import time; print('ready', flush=True); time.sleep(600)", env)
    wait_for_line(bystander, "ready")
    assert checkpoint.stopping() is None
    hook, log = run_prestop_hook(tmp_path, env, sys.executable)  # once saved, not at grace end
    assert hook.returncode == 0, hook.stderr
    notice = checkpoint.stopping()  # what JupyterLab's status item shows meanwhile
    assert notice["grace_seconds"] == 3600
    assert abs(datetime.now(timezone.utc) - datetime.fromisoformat(notice["at"])) < \
        timedelta(minutes=1)
    assert not log.exists() and checkpoint.UNAVAILABLE not in hook.stderr
    assert "still saving" not in hook.stderr
    assert child.poll() == -signal.SIGTERM
    assert checkpoint.latest("train")["step"] > 0
    assert bystander.poll() is None  # only processes that registered are signalled
    bystander.kill()
    bystander.wait()


def test_prestop_in_an_image_without_the_package_says_so_and_lets_the_stop_go_on(env,
                                                                                  tmp_path):
    """A stock image: the hook exits 0 (the stop goes on) and leaves the message the
    hub reads in the container's termination message."""
    bare = tmp_path / "stock-python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    hook, log = run_prestop_hook(tmp_path, env, str(bare / "bin" / "python"))
    assert hook.returncode == 0
    expected = (f"{checkpoint.UNAVAILABLE}: the image has no python with the "
                "jupyterhub_gpu package\n")
    assert log.read_text() == expected and hook.stderr == expected


def test_prestop_waits_for_a_slow_saver_until_the_grace_period_ends(env, tmp_path):
    env = {**env, "JUPYTERHUB_GPU_GRACE_SECONDS": "1"}
    saver = spawn("""
        import time
        from jupyterhub_gpu import checkpoint

        @checkpoint.register
        def on_stop():  # a save that never ends
            print("saving", flush=True)
            while True:
                time.sleep(0.05)

        print("ready", flush=True)
        while True:
            time.sleep(0.05)
        """, env)
    wait_for_line(saver, "ready")
    try:
        hook, _ = run_prestop_hook(tmp_path, env, sys.executable)
        assert hook.returncode == 0, hook.stderr
        assert "1 process(es) still saving when the grace period ran out" in hook.stderr
        wait_for_line(saver, "saving")  # it was signalled, and is saving still
        assert saver.poll() is None
    finally:
        saver.kill()
        saver.wait()


# -- a directory that cannot be written ----------------------------------------------------

def test_unwritable_dir_is_reported_at_import(tmp_path, env):
    (tmp_path / "not-a-dir").write_text("")
    bad = tmp_path / "not-a-dir" / "checkpoints"
    child = subprocess.run([sys.executable, "-c", "import jupyterhub_gpu.checkpoint"],
                           env={**env, "CHECKPOINT_DIR": str(bad)}, capture_output=True,
                           text=True, timeout=60)
    assert child.returncode == 0
    assert f"CheckpointDirWarning: checkpoint directory {bad} is not writable" in child.stderr


def test_register_refuses_an_unwritable_dir_and_installs_nothing(tmp_path, monkeypatch):
    (tmp_path / "not-a-dir").write_text("")
    bad = tmp_path / "not-a-dir" / "checkpoints"
    monkeypatch.setenv("CHECKPOINT_DIR", str(bad))
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(checkpoint.CheckpointDirError, match=f"{bad} is not writable"):
        checkpoint.register(lambda: None)
    assert signal.getsignal(signal.SIGTERM) is before


# -- PyTorch -------------------------------------------------------------------------------

HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.skipif(HAS_TORCH, reason="PyTorch is installed: its absence cannot be tested")
def test_torch_helpers_explain_what_to_use_without_torch(env):
    with pytest.raises(ImportError, match=r"need PyTorch; without it use checkpoint.save"):
        checkpoint.save_torch(object())


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed (not a dependency)")
def test_torch_model_and_optimizer_round_trip(env):
    import torch

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    checkpoint.save_torch(model, optimizer, step=42, epoch=3)
    fresh = torch.nn.Linear(3, 2)
    state = checkpoint.load_torch(fresh, torch.optim.SGD(fresh.parameters(), lr=0.5))
    assert state["step"] == 42 and state["extra"] == {"epoch": 3}
    assert torch.equal(fresh.weight, model.weight)
