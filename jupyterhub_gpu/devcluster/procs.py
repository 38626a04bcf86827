"""Local processes of the dev cluster: start, identify, health-check and stop them.

Each started process gets a pid file (JSON: pid, binary, argv, kernel start time).
A process is "ours" only while ``/proc/<pid>/cmdline`` still starts with the
recorded binary and its start time matches, so a recycled pid is never signalled.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from .components import Component, Health
from .layout import HOST, Layout, log_tail
from .pki import PkiPaths

LOG_TAIL_LINES = 30


class ComponentError(RuntimeError):
    """A component failed to start, crashed or never became healthy."""


@dataclass(frozen=True)
class PidRecord:
    name: str
    pid: int
    binary: str
    argv: list[str]
    start_ticks: int | None
    started_at: float

    @classmethod
    def load(cls, path: Path) -> "PidRecord | None":
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces; everything after ")" is positional
    return raw[raw.rindex(")") + 2:].split()


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None  # field 22 of stat


def cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a] or None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first (JupyterHub starts its services and
    its proxy in sessions of their own: they are its children all the same)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(int(stat.parent.name))
        if fields:
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def _ignored_signals(pid: int) -> list[str]:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return []
    mask = next((int(line.split()[1], 16) for line in status.splitlines()
                 if line.startswith("SigIgn:")), 0)
    return [sig.name for sig in (signal.SIGINT, signal.SIGTERM) if mask & (1 << (sig - 1))]


def describe(pid: int) -> str:
    """``pid``, its command line and which of SIGINT and SIGTERM it ignores, for a
    report of what did not stop."""
    ignored = _ignored_signals(pid)
    line = " ".join(cmdline(pid) or ["(gone)"])
    return f"pid {pid} ({line[:160]})" + (f", ignoring {' and '.join(ignored)}"
                                           if ignored else "")


def is_ours(rec: PidRecord) -> bool:
    argv = cmdline(rec.pid)
    if not alive(rec.pid) or not argv or argv[0] != rec.binary:
        return False
    return rec.start_ticks is None or start_ticks(rec.pid) == rec.start_ticks


def records(layout: Layout) -> dict[str, PidRecord]:
    found = {}
    for path in sorted(layout.pids_dir.glob("*.pid")):
        rec = PidRecord.load(path)
        if rec is not None:
            found[rec.name] = rec
    return found


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null: later prints, and the flush at exit, then succeed."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def unfailing(progress: Callable[[str], None]) -> Callable[[str], None]:
    """``progress`` that never raises, so that stopping processes never depends on
    being able to print: once the output is gone (``make demo | tee log`` whose tee
    the same Ctrl-C ended, a closed terminal) messages are dropped."""
    if getattr(progress, "unfailing", False):
        return progress
    gone = False

    def report(message: str) -> None:
        nonlocal gone
        if gone:
            return
        try:
            progress(message)
        except (OSError, ValueError):  # BrokenPipeError, EIO, a closed file
            gone = True
            _silence_stdout()

    report.unfailing = True  # type: ignore[attr-defined]
    return report


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def launch(component: Component, layout: Layout, append: bool = False) -> subprocess.Popen:
    """Start ``component`` in its own session, logging to logs/<name>.log (after what
    the log holds, if ``append``: a restarted component's earlier run is kept)."""
    log_path = layout.log(component.name)
    with log_path.open("a" if append else "w") as log:
        log.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(component.argv)}\n")
        log.flush()
        proc = subprocess.Popen(list(component.argv), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=layout.root,
                                env=_child_env(dict(component.env)), start_new_session=True)
    rec = PidRecord(component.name, proc.pid, component.binary, list(component.argv),
                    start_ticks(proc.pid), time.time())
    layout.pid_file(component.name).write_text(json.dumps(asdict(rec)))
    return proc


def _ssl_context(health: Health, pki: PkiPaths) -> ssl.SSLContext | None:
    if health.tls == "none":
        return None
    if health.tls == "insecure":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
    ctx.load_cert_chain(str(pki.admin_crt), str(pki.admin_key))
    return ctx


def probe(health: Health, pki: PkiPaths, timeout: float = 2.0) -> str | None:
    """None when healthy, else a short reason."""
    handlers = [urllib.request.ProxyHandler({})]
    ctx = _ssl_context(health, pki)
    if ctx is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ctx))
    try:
        with urllib.request.build_opener(*handlers).open(health.url, timeout=timeout) as r:
            return None if r.status == 200 else f"HTTP {r.status}"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    except (urllib.error.URLError, OSError) as e:
        return str(getattr(e, "reason", e))


def _failure(component: Component, layout: Layout, what: str) -> ComponentError:
    log = layout.log(component.name)
    return ComponentError(f"{component.name} {what}. Last lines of {log}:\n"
                          f"{log_tail(log, LOG_TAIL_LINES)}")


def _check_log(component: Component, layout: Layout) -> None:
    try:
        text = layout.log(component.name).read_text(errors="replace")
    except OSError:
        return
    # what the component wrote, after the command line launch() logged first
    text = text.partition(" ".join(component.argv) + "\n")[2]
    for fatal in component.fatal_log:
        found = next((line for line in text.splitlines() if fatal in line), None)
        if found is not None:
            raise _failure(component, layout, f"logged {fatal!r} while starting: {found.strip()}")


def wait_healthy(component: Component, proc: subprocess.Popen, layout: Layout,
                 pki: PkiPaths, timeout: float) -> float:
    """Wait until the health URL answers 200; return seconds waited. A component that
    exits, or logs one of its ``fatal_log`` lines, fails at once."""
    start = time.monotonic()
    reason = "no answer"
    while time.monotonic() - start < timeout:
        code = proc.poll()
        if code is not None:
            raise _failure(component, layout, f"exited with code {code} while starting")
        _check_log(component, layout)
        reason = probe(component.health, pki) or ""
        if not reason:
            _check_log(component, layout)
            return time.monotonic() - start
        time.sleep(0.2)
    raise _failure(component, layout,
                   f"was not healthy after {timeout:.0f}s ({component.health.url}: {reason})")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def stop(rec: PidRecord, layout: Layout, timeout: float = 10.0) -> str:
    """Stop one recorded process if it is still ours; remove its pid file."""
    outcome = "not running"
    if is_ours(rec):
        os.kill(rec.pid, signal.SIGTERM)
        outcome = "stopped"
        if not _wait_gone(rec.pid, timeout):
            if is_ours(rec):
                os.kill(rec.pid, signal.SIGKILL)
            _wait_gone(rec.pid, 5.0)
            outcome = "killed"
    layout.pid_file(rec.name).unlink(missing_ok=True)
    return outcome


def port_free(port: int, host: str = HOST) -> bool:
    """Nothing listens on ``port`` of ``host`` (``""``: of every interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def _fd_links(pid_dir: Path) -> set[str]:
    """What a process's file descriptors point at (fds may close while we look)."""
    links = set()
    try:
        fds = list((pid_dir / "fd").iterdir())
    except OSError:
        return links
    for fd in fds:
        try:
            links.add(os.readlink(fd))
        except OSError:
            continue
    return links


def port_holder(port: int) -> str | None:
    """'pid N (command line)' of whoever listens on ``port``, when /proc tells."""
    targets = {f"socket:[{i}]" for i in _listening_inodes(port)}
    if not targets:
        return None
    for pid_dir in Path("/proc").iterdir():
        if pid_dir.name.isdigit() and _fd_links(pid_dir) & targets:
            argv = cmdline(int(pid_dir.name)) or ["?"]
            return f"pid {pid_dir.name} ({' '.join(argv)[:120]})"
    return "a process this user cannot inspect"
