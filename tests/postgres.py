"""A real PostgreSQL server for the tests: Debian's ``postgresql`` package (``make
system-packages`` installs it), a throwaway cluster in a temporary directory on a free
port, run as the unprivileged ``postgres`` user when the tests run as root (initdb
refuses root). Without PostgreSQL the tests that need it skip, except in CI, where
they fail (:func:`tests.conftest.need_tool`)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from contextlib import contextmanager
from typing import Iterator

from .conftest import need_tool

WHY = "the usage ledger's tests run on a real PostgreSQL server"


def _bin(name: str) -> str:
    """``name`` from PATH or from Debian's versioned directory, newest first."""
    found = shutil.which(name) or next(iter(sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    return found or need_tool(name, WHY)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running server; yields the SQLAlchemy URL of its database ``postgres``
    (psycopg 3), user ``postgres``, trust auth on 127.0.0.1."""
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    as_user: list[str] = []
    tmp = tempfile.mkdtemp(prefix="jupyterhub-gpu-pg-")
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(tmp, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = os.path.join(tmp, "data"), _free_port()
    subprocess.run([*as_user, initdb, "-D", data, "-U", "postgres", "--auth=trust",
                    "--no-sync"], check=True, capture_output=True)
    options = f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run([*as_user, pg_ctl, "-D", data, "-o", options, "-l",
                    os.path.join(tmp, "log"), "-w", "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
