"""``jupyterhub-gpu job submit|list|status|logs|cancel``: the jobs service from a
notebook terminal.

It needs only what the server's environment already has: ``JUPYTERHUB_API_TOKEN``
(the server's token, which may call the service) and ``JUPYTERHUB_GPU_JOBS_URL`` (the
service's URL, which the hub puts in every server's environment). Standard library
only, so the command starts fast in any notebook image.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import urllib.error
import urllib.request
from enum import IntEnum
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..contract import ENV_API_TOKEN, ENV_JOBS_URL, JOBS_API_PATH, JOBS_SERVICE_NAME


class Exit(IntEnum):
    """The exit statuses of ``jupyterhub-gpu job`` (``job --help`` lists them, with
    :data:`EXIT_MEANINGS`)."""

    OK = 0
    REFUSED = 1
    USAGE = 2  # argparse's own, for a wrong command line
    UNREACHABLE = 3
    SERVICE_ERROR = 4
    NOT_SET_UP = 5


EXIT_MEANINGS = {
    Exit.OK: "done",
    Exit.REFUSED: "refused, saying why: by the jobs service (HTTP 4xx: no such job, a "
                  "profile not yours, over your job limit, no server running) or before "
                  "asking it (a script outside your home)",
    Exit.USAGE: "the command line is wrong (a missing or unknown argument)",
    Exit.UNREACHABLE: "the jobs service cannot be reached (the hub or its service is down, "
                      "or the network): try again later",
    Exit.SERVICE_ERROR: "the jobs service could not do it (HTTP 5xx, saying why: it cannot "
                        "read the cluster yet, the cluster serves no logs)",
    Exit.NOT_SET_UP: f"not run where a server's environment is: ${ENV_JOBS_URL} (and no "
                     f"--url) or ${ENV_API_TOKEN} is not set",
}


def exit_epilog() -> str:
    """The exit statuses, as ``--help`` ends."""
    return "exit status:\n" + "\n".join(
        textwrap.fill(what, 79, initial_indent=f"  {int(code)}  ", subsequent_indent=" " * 5)
        for code, what in EXIT_MEANINGS.items())


class JobCommandError(Exception):
    """What went wrong, in words, and the exit status."""

    def __init__(self, message: str, status: Exit = Exit.REFUSED):
        super().__init__(message)
        self.status = status


def script_in_home(script: str, home: Path, cwd: Path) -> str:
    """``script`` (as typed, relative to ``cwd``) as a path relative to ``home``."""
    path = Path(os.path.normpath(cwd / script))
    try:
        return path.relative_to(home).as_posix()
    except ValueError:
        raise JobCommandError(f"{script} is not in your home directory ({home}): a job "
                              "sees only your home.") from None


class Client:
    """The service's API with the server's token."""

    def __init__(self, url: str | None, token: str | None):
        if not url:
            raise JobCommandError(f"${ENV_JOBS_URL} is not set: run this in a terminal of "
                                  "your JupyterHub server (the hub sets it when it runs the "
                                  f"{JOBS_SERVICE_NAME} service), or pass --url.",
                                  Exit.NOT_SET_UP)
        if not token:
            raise JobCommandError(f"${ENV_API_TOKEN} is not set: run this in a terminal of "
                                  "your JupyterHub server, or set it to an API token of yours.",
                                  Exit.NOT_SET_UP)
        self.base = url.rstrip("/") + "/" + JOBS_API_PATH
        self.token = token

    def open(self, method: str, path: str = "", body: Any = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path, data=data, method=method,
            headers={"Authorization": f"token {self.token}",
                     "Content-Type": "application/json"})
        try:
            return urllib.request.urlopen(request)
        except urllib.error.HTTPError as e:
            raise JobCommandError(f"{_said(e)} (HTTP {e.code})", Exit.SERVICE_ERROR
                                  if e.code >= 500 else Exit.REFUSED) from None
        except urllib.error.URLError as e:
            raise JobCommandError(f"cannot reach the jobs service at {self.base}: "
                                  f"{e.reason}", Exit.UNREACHABLE) from None

    def call(self, method: str, path: str = "", body: Any = None) -> Any:
        with self.open(method, path, body) as response:
            return json.loads(response.read() or b"null")


def _said(error: urllib.error.HTTPError) -> str:
    text = error.read().decode(errors="replace")
    try:
        return json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return text.strip() or error.reason


def _submit(client: Client, args: argparse.Namespace) -> int:
    script = script_in_home(args.script, Path.home(), Path.cwd())
    job = client.call("POST", "", {"profile": args.profile, "script": script,
                                   "args": list(args.args)})
    print(f"{job['name']}: {job['status']}")
    return Exit.OK


def _list(client: Client, args: argparse.Namespace) -> int:
    jobs = client.call("GET")["jobs"]
    if not jobs:
        print("You have no jobs.")
        return Exit.OK
    width = max(len(j["name"]) for j in jobs)
    pwidth = max(len(j["profile"] or "") for j in jobs)
    for j in jobs:
        print(f"{j['name']:<{width}}  {j['profile'] or '':<{pwidth}}  {j['status']}")
    return Exit.OK


def _status(client: Client, args: argparse.Namespace) -> int:
    job = client.call("GET", "/" + quote(args.name, safe=""))
    for key in ("name", "profile", "status", "namespace", "created", "image"):
        print(f"{key + ':':<11}{job[key]}")
    print(f"{'command:':<11}{' '.join(job['command'] or [])}")
    return Exit.OK


def _logs(client: Client, args: argparse.Namespace) -> int:
    with client.open("GET", f"/{quote(args.name, safe='')}/logs") as response:
        while chunk := response.read1(65536):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
    return Exit.OK


def _cancel(client: Client, args: argparse.Namespace) -> int:
    job = client.call("DELETE", "/" + quote(args.name, safe=""))
    print(f"{job['name']}: {job['status']}")
    return Exit.OK


def _run(args: argparse.Namespace) -> int:
    try:
        return args.job_func(Client(args.url, os.environ.get(ENV_API_TOKEN)), args)
    except JobCommandError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.status


def split_script_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """``job submit ... -- ARGS``: (what argparse parses, the script's ARGS). argparse
    would not take ``--`` under a subcommand, nor the options of the script after it."""
    if argv[:1] == ["job"] and "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def add_job_parser(sub: Any) -> None:
    """``job`` and its subcommands, under the ``jupyterhub-gpu`` command."""
    epilog = {"epilog": exit_epilog(), "formatter_class": argparse.RawDescriptionHelpFormatter}
    p = sub.add_parser("job", help="submit and follow training jobs (from a notebook)",
                       description=textwrap.fill(
                           f"Training jobs on your team's GPU queue, through the hub's "
                           f"{JOBS_SERVICE_NAME} service, with your server's token.", 79),
                       **epilog)
    p.add_argument("--url", default=os.environ.get(ENV_JOBS_URL),
                   help=f"the jobs service (default: ${ENV_JOBS_URL})")
    p.set_defaults(func=_run)
    jobs = p.add_subparsers(dest="job_command", required=True, metavar="SUBCOMMAND")
    s = jobs.add_parser("submit", help="run SCRIPT as a job: python SCRIPT ARGS...",
                        description=textwrap.fill(
                            "Queue `python SCRIPT ARGS...` as a job of PROFILE, in your "
                            "server's image, in SCRIPT's directory of your home. Put the "
                            "script's own options after `--`.", 79), **epilog)
    s.add_argument("script", metavar="SCRIPT", help="a Python file in your home directory")
    s.add_argument("--profile", required=True, help="a job profile's slug")
    s.add_argument("args", nargs="*", metavar="ARGS", help="the script's arguments")
    s.set_defaults(job_func=_submit)
    jobs.add_parser("list", help="your jobs and their status",
                    **epilog).set_defaults(job_func=_list)
    for name, func, what in (("status", _status, "a job's status"),
                             ("logs", _logs, "a job's log, followed while it runs"),
                             ("cancel", _cancel, "stop a job and remove it")):
        q = jobs.add_parser(name, help=what, **epilog)
        q.add_argument("name", metavar="NAME", help="the job's name (see `job list`)")
        q.set_defaults(job_func=func)
