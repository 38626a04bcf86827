"""Checkpoints that survive preemption, spot eviction and culling.

In a notebook (or a script started from its terminal)::

    from jupyterhub_gpu import checkpoint

    state = checkpoint.latest("train", default={"step": 0})   # resume

    @checkpoint.register            # runs on SIGTERM, within the grace period
    def on_stop():
        checkpoint.save(state, "train")

    # with PyTorch: checkpoint.save_torch(model, optimizer, step)
    #               step = checkpoint.load_torch(model, optimizer)["step"]

* Checkpoints go to ``$CHECKPOINT_DIR`` (the per-user persistent volume the
  spawner mounts), else ``~/checkpoints``. A directory that cannot be written is
  reported when this module is imported (a :class:`CheckpointDirWarning`) and
  :func:`register` refuses it (:class:`CheckpointDirError`), naming the directory --
  not at the first save, when it is too late.
* A save is atomic: a temporary file is written, fsynced and renamed, then the
  manifest naming the complete files is replaced the same way. :func:`latest` only
  reads files the manifest lists, and checks their size and SHA-256, so a save
  killed half-way (SIGKILL, node loss) is never returned: the previous one is.
* :func:`register` installs a SIGTERM handler that runs the callbacks, then lets the
  process exit as SIGTERM would. The pod's preStop hook
  (``python -m jupyterhub_gpu.checkpoint prestop``) sends SIGTERM to every process
  that registered, and waits for them, within ``$JUPYTERHUB_GPU_GRACE_SECONDS``.
  In an image without this package the hook says so in the container's termination
  message instead (:func:`prestop_command`), and the hub logs it once per image.
* A GPU kernel released for idleness gets no SIGTERM: its server first runs
  :func:`release_code` in it (:func:`run_callbacks`, in the kernel's main thread, as
  the handler would), bounded in time, then shuts it down. Callbacks run once per
  process, so a SIGTERM after that only exits.

Only the standard library is used (PyTorch is optional). Pickled checkpoints are
loaded with :mod:`pickle`: only load checkpoints you wrote.
"""

from __future__ import annotations

import atexit
import hashlib
import io
import json
import os
import pickle
import re
import shlex
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, Callable

from .contract import ENV_CHECKPOINT_DIR, ENV_GRACE, ENV_RUN_DIR

DEFAULT_GRACE_SECONDS = 30
# Where the kubelet reads a container's termination message (the Kubernetes default of
# a container's terminationMessagePath); it appears in the pod's status once it stops.
TERMINATION_LOG = "/dev/termination-log"
# What the preStop hook reports when the image cannot run it; the hub looks for it
UNAVAILABLE = "jupyterhub-gpu: checkpoint-on-stop unavailable"
MANIFEST = "MANIFEST.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_STALE_TMP_SECONDS = 3600
STOPPING_FILE = "stopping.json"  # in the run dir: the preStop hook has run


class CheckpointDirError(RuntimeError):
    """The checkpoint directory cannot be written."""


class CheckpointDirWarning(UserWarning):
    """The checkpoint directory cannot be written (reported at import)."""


def checkpoint_dir() -> Path:
    return Path(os.environ.get(ENV_CHECKPOINT_DIR) or Path.home() / "checkpoints")


def grace_seconds() -> int:
    try:
        return max(1, int(os.environ.get(ENV_GRACE, DEFAULT_GRACE_SECONDS)))
    except ValueError:
        return DEFAULT_GRACE_SECONDS


def dir_problem(directory: str | Path | None = None) -> str | None:
    """Why checkpoints cannot be written to ``directory``; None if they can."""
    path = Path(directory or checkpoint_dir())
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"checkpoint directory {path} is not writable: {e.strerror or e}"
    return None


def check_dir(directory: str | Path | None = None) -> Path:
    """The checkpoint directory, or :class:`CheckpointDirError` saying what is wrong."""
    problem = dir_problem(directory)
    if problem:
        raise CheckpointDirError(problem)
    return Path(directory or checkpoint_dir())


# -- atomic files --------------------------------------------------------------------

def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Hashing(io.RawIOBase):
    """A write-only file wrapper that counts and hashes what goes through it."""

    def __init__(self, f: BinaryIO):
        self.f, self.sha, self.size = f, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.f.write(view)
        self.sha.update(view)
        self.size += len(view)
        return len(view)


def _write_atomic(path: Path, write: Callable[[BinaryIO], None]) -> _Hashing:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "xb") as f:
            hashing = _Hashing(f)
            write(hashing)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return hashing


# -- save and resume -----------------------------------------------------------------

def _name_dir(name: str, directory: str | Path | None) -> Path:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"checkpoint name {name!r}: use letters, digits, '.', '_', '-'")
    return Path(directory or checkpoint_dir()) / name


def _manifest(folder: Path) -> list[dict]:
    try:
        entries = json.loads((folder / MANIFEST).read_text())["entries"]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as e:
        warnings.warn(f"unreadable checkpoint manifest {folder / MANIFEST}: {e}", stacklevel=3)
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("file"), str)]


def _prune(folder: Path, keep: set[str]) -> None:
    now = time.time()
    for path in folder.iterdir():
        stale_tmp = path.suffix == ".tmp" and now - path.stat().st_mtime > _STALE_TMP_SECONDS
        if (path.suffix == ".ckpt" and path.name not in keep) or stale_tmp:
            path.unlink(missing_ok=True)


def save(obj: Any, name: str, *, directory: str | Path | None = None, keep: int = 3,
         _format: str | None = None) -> Path:
    """Save ``obj`` (bytes as they are, anything else pickled) as checkpoint ``name``.

    Returns the file. The ``keep`` newest checkpoints of ``name`` are kept."""
    folder = _name_dir(name, directory)
    folder.mkdir(parents=True, exist_ok=True)
    entries = _manifest(folder)
    seq = max((int(e.get("seq", 0)) for e in entries), default=0) + 1
    raw = isinstance(obj, (bytes, bytearray, memoryview))
    fmt = _format or ("bytes" if raw else "pickle")
    path = folder / f"{seq:08d}-{os.urandom(3).hex()}.ckpt"
    written = _write_atomic(path, (lambda f: f.write(obj)) if raw else
                            (lambda f: pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)))
    entries.append({"seq": seq, "file": path.name, "format": fmt, "size": written.size,
                    "sha256": written.sha.hexdigest(),
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    entries = entries[-max(1, keep):]
    manifest = json.dumps({"version": 1, "entries": entries}, indent=1).encode()
    _write_atomic(folder / MANIFEST, lambda f: f.write(manifest))
    _prune(folder, {e["file"] for e in entries})
    return path


def _latest_entry(name: str, directory: str | Path | None) -> tuple[dict, bytes] | None:
    """The newest listed checkpoint whose content matches its size and hash."""
    folder = _name_dir(name, directory)
    for entry in reversed(_manifest(folder)):
        try:
            data = (folder / entry["file"]).read_bytes()
        except OSError:
            continue
        if len(data) == entry.get("size") and hashlib.sha256(data).hexdigest() == entry.get(
                "sha256"):
            return entry, data
    return None


def latest(name: str, *, directory: str | Path | None = None, default: Any = None) -> Any:
    """The newest complete checkpoint ``name`` (bytes, or the unpickled object), or
    ``default`` when there is none."""
    found = _latest_entry(name, directory)
    if found is None:
        return default
    entry, data = found
    return pickle.loads(data) if entry.get("format") == "pickle" else data


def latest_path(name: str, *, directory: str | Path | None = None) -> Path | None:
    found = _latest_entry(name, directory)
    return None if found is None else _name_dir(name, directory) / found[0]["file"]


# -- PyTorch -------------------------------------------------------------------------

def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ImportError("save_torch/load_torch need PyTorch; without it use "
                          "checkpoint.save(obj, name)") from e
    return torch


def save_torch(model: Any, optimizer: Any = None, step: int | None = None, *,
               name: str = "torch", directory: str | Path | None = None, **extra: Any) -> Path:
    """Save ``model`` (and ``optimizer``) state dicts and ``step`` with torch.save."""
    torch, buffer = _torch(), io.BytesIO()
    torch.save({"model": model.state_dict(), "step": step, "extra": extra,
                "optimizer": optimizer.state_dict() if optimizer is not None else None},
               buffer)
    return save(buffer.getbuffer(), name, directory=directory, _format="torch")


def load_torch(model: Any = None, optimizer: Any = None, *, name: str = "torch",
               directory: str | Path | None = None, map_location: Any = None) -> dict | None:
    """Load the newest :func:`save_torch` checkpoint into ``model``/``optimizer``;
    returns it (``["step"]``, ``["extra"]``...), or None when there is none."""
    found = _latest_entry(name, directory)
    if found is None:
        return None
    state = _torch().load(io.BytesIO(found[1]), map_location=map_location, weights_only=True)
    if model is not None:
        model.load_state_dict(state["model"])
    if optimizer is not None and state.get("optimizer") is not None:
        optimizer.load_state_dict(state["optimizer"])
    return state


# -- SIGTERM -------------------------------------------------------------------------

_callbacks: list[Callable[[], Any]] = []
_previous_handler: Any = None
_handling = False
_ran = False  # the callbacks have run (once per process)


def _say(message: str) -> None:
    print(f"jupyterhub_gpu.checkpoint: {message}", file=sys.stderr, flush=True)


def _run_dir() -> Path:
    return Path(os.environ.get(ENV_RUN_DIR) or Path(tempfile.gettempdir()) / "jupyterhub-gpu")


def _pid_file() -> Path:
    return _run_dir() / "checkpoint-pids" / str(os.getpid())


def _stopping_file() -> Path:
    return _run_dir() / STOPPING_FILE


def stopping() -> dict | None:
    """``{"at": ISO time, "grace_seconds": N}`` once the pod's preStop hook has run
    (the pod is being stopped: preempted, evicted, culled or stopped by its user);
    None before. JupyterLab's status item reads it (:mod:`jupyterhub_gpu.labext`)."""
    try:
        notice = json.loads(_stopping_file().read_text())
    except (OSError, ValueError):
        return None
    return notice if isinstance(notice, dict) and isinstance(notice.get("at"), str) else None


def _mark_stopping() -> None:
    notice = {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "grace_seconds": grace_seconds()}
    try:
        path = _stopping_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(notice))
    except OSError as e:  # telling the user must never hold up the stop
        _say(f"cannot leave the stop notice in {_run_dir()}: {e}")


def _forget_pid() -> None:
    _pid_file().unlink(missing_ok=True)


def _sigterm_budget() -> int:
    """The seconds callbacks get after SIGTERM: the grace period, less a margin to exit."""
    return grace_seconds() - min(5, grace_seconds() // 5)


def run_callbacks(budget: float, why: str) -> int:
    """Run the registered callbacks, in order, each while less than ``budget`` seconds
    have passed since the first began; once per process (a second call runs none).
    ``why`` starts what it says on stderr. How many ran."""
    global _ran
    if _ran:
        return 0
    _ran = True
    started, ran = time.monotonic(), 0
    _say(f"{why}: running {len(_callbacks)} checkpoint callback(s), {budget:g}s of grace")
    for callback in list(_callbacks):
        if time.monotonic() - started > budget:
            _say(f"no grace left, skipped {getattr(callback, '__name__', callback)}")
            continue
        ran += 1
        try:
            callback()
        except Exception:  # one failing callback must not stop the others
            traceback.print_exc()
    _say(f"checkpoint callbacks done in {time.monotonic() - started:.1f}s")
    return ran


def release_code(budget: float) -> str:
    """What a GPU kernel's server runs in the kernel before releasing it: the
    callbacks, if the kernel's code imported this module (else there are none), with
    ``budget`` seconds; an expression that leaves no name behind."""
    return (f"(lambda m: m.run_callbacks({float(budget)!r}, 'GPU kernel released') if m "
            f"else 0)(__import__('sys').modules.get({__name__!r}))")


def _on_sigterm(signum: int, frame: Any) -> None:
    global _handling
    if _handling:  # a second SIGTERM while saving
        return
    _handling = True
    run_callbacks(_sigterm_budget(), "SIGTERM")
    _forget_pid()
    if callable(_previous_handler):
        _previous_handler(signum, frame)
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)  # exit as SIGTERM would have


def register(callback: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``callback()`` on SIGTERM, then exit. Usable as a decorator.

    Raises :class:`CheckpointDirError` now if the checkpoint directory is not
    writable. Call it from the main thread (Python runs signal handlers there)."""
    global _previous_handler
    check_dir()
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("checkpoint.register() must be called from the main thread")
    if not _callbacks:
        _previous_handler = signal.signal(signal.SIGTERM, _on_sigterm)
        pid_file = _pid_file()
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(str(grace_seconds()))
        atexit.register(_forget_pid)
    if callback not in _callbacks:
        _callbacks.append(callback)
    return callback


def unregister(callback: Callable[[], Any]) -> None:
    if callback in _callbacks:
        _callbacks.remove(callback)


# -- preStop -------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    """Running (an exited process its parent has not reaped yet is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: a zombie ("Z") has exited
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def prestop(wait_seconds: float | None = None) -> int:
    """SIGTERM every process that registered a callback; wait until they exit.

    For the pod's preStop hook: first it leaves the notice that the pod is stopping
    (:func:`stopping`). Returns how many were still running at the end."""
    _mark_stopping()
    folder = _pid_file().parent
    pids = [int(p.name) for p in folder.glob("*") if p.name.isdigit()] if folder.is_dir() else []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            (folder / str(pid)).unlink(missing_ok=True)
    wait = _sigterm_budget() if wait_seconds is None else wait_seconds
    deadline = time.monotonic() + wait
    while (running := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return len(running)


def prestop_command(termination_log: str = TERMINATION_LOG) -> tuple[str, ...]:
    """The pod's preStop hook: ``python -m jupyterhub_gpu.checkpoint prestop`` when the
    image has this package; else (a stock image) it writes :data:`UNAVAILABLE` to the
    termination message, where the hub reads it, and exits 0 -- the stop goes on."""
    message = shlex.quote(f"{UNAVAILABLE}: the image has no python with the "
                          "jupyterhub_gpu package")
    return ("sh", "-c",
            "if python -c 'import jupyterhub_gpu.checkpoint' >/dev/null 2>&1; then "
            "exec python -m jupyterhub_gpu.checkpoint prestop; fi; "
            f"m={message}; echo \"$m\" >&2; echo \"$m\" > {shlex.quote(termination_log)}; "
            "exit 0")


# The pod's preStop hook: {"preStop": {"exec": {"command": list(PRESTOP_COMMAND)}}}
PRESTOP_COMMAND = prestop_command()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["prestop"]:
        print("usage: python -m jupyterhub_gpu.checkpoint prestop", file=sys.stderr)
        return 2
    left = prestop()
    if left:
        _say(f"{left} process(es) still saving when the grace period ran out")
    return 0


if os.environ.get(ENV_CHECKPOINT_DIR) and (_problem := dir_problem()):
    warnings.warn(_problem, CheckpointDirWarning, stacklevel=2)

if __name__ == "__main__":
    sys.exit(main())
