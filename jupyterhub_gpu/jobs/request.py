"""A job submission checked as a spawn is, before anything touches Kubernetes (pure).

The body of ``POST api/jobs`` has exactly ``profile`` (a job profile's slug), ``script``
and, optionally, ``args``. ``script`` is a path relative to the user's home directory
(their notebook's home volume, which the job mounts at the same place): the job runs
``python <file> <args...>`` in the script's directory (the home, or the directory of
the home the script is in: where the user's code and its files are). An absolute path,
one that leaves the home (``..``) or a file name that starts with ``-`` (Python would
take it as an option: ``-c`` runs code) is refused; so are a namespace or an image, which come
from the user's team and their running server (or the profile), never from the
request. The arguments come after the script, so Python passes every one of them to
it, whatever it starts with.

Everything is bounded: the request body (:data:`MAX_BODY_BYTES`), the script's path
(:data:`MAX_SCRIPT_CHARS`), the number of arguments (:data:`MAX_ARGS`), each one's size
(:data:`MAX_ARG_BYTES`) and all of them together (:data:`MAX_ARGS_BYTES`): a Job is
one object in etcd, whose limit is about 1.5 MiB.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..builders.job import (DEFAULT_HOME_MOUNT_PATH, JobGrant, JobRequest, home_of,
                            identity_of)
from ..spec.grant import UserRef
from ..contract import USERNAME_KEY
from ..logtext import shown
from ..refusals import Refused
from ..spec.model import CheckpointStorage, JobProfile, Platform

FIELDS = ("profile", "script", "args")
#: fields a forged request might carry, and why each is not the user's to choose
CHOSEN_BY_THE_PLATFORM = {
    "namespace": "the namespace is your team's",
    "image": "the image is your running server's (or the job profile's)",
}
MAX_ARGS = 100
#: the most bytes (UTF-8) of one argument, and of all of them together
MAX_ARG_BYTES = 8 * 1024
MAX_ARGS_BYTES = 64 * 1024
#: the most characters of the script's path
MAX_SCRIPT_CHARS = 1024
#: the most bytes of a request body: the arguments, JSON-escaped, and room to spare
MAX_BODY_BYTES = 4 * MAX_ARGS_BYTES
MAX_NAME = 50  # room for an Indexed Job's "-<index>" in a 63-character hostname
PYTHON = "python"
#: how much of an unknown profile's name a refusal quotes back
MAX_SHOWN_PROFILE = 100


class JobRefused(Refused):
    """A job submission that may not run (:class:`jupyterhub_gpu.refusals.Refused`)."""


@dataclass(frozen=True)
class Submission:
    """A checked request: what the job runs and under which grant."""

    grant: JobGrant
    script: str  # relative to the home directory, normalized
    args: tuple[str, ...]

    @property
    def directory(self) -> str:
        """The script's directory, relative to the home ("": the home itself): the
        job's working directory, where the user's code and its files are."""
        return posixpath.dirname(self.script)

    @property
    def command(self) -> tuple[str, ...]:
        """What runs in :attr:`directory`: Python, the script's file name, the args."""
        return (PYTHON, posixpath.basename(self.script), *self.args)


def job_profiles_for(platform: Platform, groups: Iterable[str]) -> tuple[JobProfile, ...]:
    """The job profiles a user in ``groups`` may submit (none without a team)."""
    groups = set(groups)
    if platform.team_for(groups) is None:
        return ()
    return tuple(p for p in platform.job_profiles
                 if not p.allowed_groups or set(p.allowed_groups) & groups)


def _fields(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise JobRefused("The request must be a JSON object with 'profile' and 'script'.",
                         f"body is a {type(body).__name__}")
    chosen = sorted(set(body) & set(CHOSEN_BY_THE_PLATFORM))
    if chosen:
        why = "; ".join(CHOSEN_BY_THE_PLATFORM[k] for k in chosen)
        raise JobRefused(f"A job request may not set {', '.join(chosen)}: {why}.",
                         f"forged field(s) {chosen}")
    extra = sorted(set(body) - set(FIELDS))
    if extra:
        raise JobRefused(f"Unknown field(s) {', '.join(map(repr, extra))}; a job request "
                         f"has only {', '.join(FIELDS)}.", f"extra field(s) {extra}")
    return body


def _grant(platform: Platform, user: UserRef, slug: Any) -> JobGrant:
    team = platform.team_for(user.groups)
    if team is None:
        raise JobRefused("You are in no team of this hub, so you may submit no job.",
                         f"no team for groups {sorted(user.groups)}")
    allowed = job_profiles_for(platform, user.groups)
    yours = ", ".join(p.slug for p in allowed) or "none"
    profile = platform.job_profile(slug) if isinstance(slug, str) else None
    named = repr(shown(slug, MAX_SHOWN_PROFILE))  # any input: bounded and escaped
    if profile is None:
        raise JobRefused(f"Unknown job profile {named}; yours: {yours}.",
                         f"unknown job profile {named}")
    if profile not in allowed:
        raise JobRefused(f"You may not submit job profile {named}; yours: {yours}.",
                         f"job profile {named} not allowed for groups {sorted(user.groups)}")
    return JobGrant.of(platform, profile, team)


def check_script(script: Any) -> str:
    """``script`` as a normalized path relative to the home directory."""
    if not isinstance(script, str) or not script.strip() or not script.isprintable():
        raise JobRefused("'script' must be the path of a Python file in your home "
                         "directory (printable characters only).", f"script {script!r}")
    if len(script) > MAX_SCRIPT_CHARS:
        raise JobRefused(f"The script's path is longer than {MAX_SCRIPT_CHARS} characters.",
                         f"script path of {len(script)} characters")
    if posixpath.isabs(script):
        raise JobRefused(f"The script {script!r} must be a path relative to your home "
                         "directory.", f"absolute script path {script!r}")
    normal = posixpath.normpath(script)
    if normal == ".." or normal.startswith("../") or normal == ".":
        raise JobRefused(f"The script {script!r} is outside your home directory.",
                         f"script path {script!r} leaves the home")
    if posixpath.basename(normal).startswith("-"):  # what Python is given
        raise JobRefused(f"The script {script!r} starts with '-', which Python would take "
                         "as an option: rename the file.", f"script {script!r} is an option")
    return normal


def check_args(args: Any) -> tuple[str, ...]:
    """``args`` as the script's arguments: at most :data:`MAX_ARGS` strings, each at
    most :data:`MAX_ARG_BYTES` and all together at most :data:`MAX_ARGS_BYTES`."""
    if args is None:
        return ()
    if (not isinstance(args, list) or len(args) > MAX_ARGS
            or not all(isinstance(a, str) and "\0" not in a and _is_utf8(a) for a in args)):
        raise JobRefused(f"'args' must be a list of at most {MAX_ARGS} strings (no NUL, "
                         "valid Unicode).", f"args: a {type(args).__name__} of {_count(args)}")
    sizes = [len(a.encode("utf-8")) for a in args]
    if sizes and max(sizes) > MAX_ARG_BYTES:
        raise JobRefused(f"An argument is larger than {MAX_ARG_BYTES} bytes (argument "
                         f"{sizes.index(max(sizes)) + 1}: {max(sizes)} bytes); pass a file "
                         "instead.", f"an argument of {max(sizes)} bytes")
    if sum(sizes) > MAX_ARGS_BYTES:
        raise JobRefused(f"The arguments are larger than {MAX_ARGS_BYTES} bytes together "
                         f"({sum(sizes)} bytes); pass a file instead.",
                         f"arguments of {sum(sizes)} bytes")
    return tuple(args)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, which JSON can carry
        return False
    return True


def _count(value: Any) -> str:
    return f"{len(value)} item(s)" if isinstance(value, (list, dict, str)) else "1 value"


def check_submission(platform: Platform, user: UserRef, body: Any,
                     active_jobs: int) -> Submission:
    """The submission ``body`` of ``user``, who has ``active_jobs`` jobs not finished,
    or :class:`JobRefused` saying why not."""
    fields = _fields(body)
    grant = _grant(platform, user, fields.get("profile"))
    submission = Submission(grant, check_script(fields.get("script")),
                            check_args(fields.get("args")))
    if active_jobs >= platform.jobs_per_user:
        raise JobRefused(
            f"You have {active_jobs} job(s) queued or running, the most one user may have "
            f"at once ({platform.jobs_per_user}); cancel one or wait for one to finish.",
            f"over the limit: {active_jobs} active of {platform.jobs_per_user}")
    return submission


def job_name(user_slug: str, suffix: str) -> str:
    """A DNS-1035 label for a user's job (a multi-pod job's Service needs one)."""
    stem = re.sub(r"[^a-z0-9-]+", "-", user_slug.lower()).strip("-")[:MAX_NAME - 12]
    return f"job-{stem}-{suffix}" if stem else f"job-{suffix}"


def _notebook_image(pod: Mapping[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return containers[0].get("image", "")


def job_request(submission: Submission, notebook: Mapping[str, Any], name: str,
                storage: CheckpointStorage | None, username: str,
                home_path: str = DEFAULT_HOME_MOUNT_PATH) -> JobRequest:
    """The Job of ``submission`` for JupyterHub user ``username``, whose running
    notebook pod is ``notebook``: its image (unless the profile sets one), user
    slug, identity (uid, gid, fsGroup) and home, the claim it mounts at
    ``home_path`` (the chart's ``singleuser.storage.homeMountPath``)."""
    labels = (notebook.get("metadata") or {}).get("labels") or {}
    return JobRequest(name=name, user_slug=labels.get(USERNAME_KEY, ""), username=username,
                      grant=submission.grant,
                      image=submission.grant.profile.image or _notebook_image(notebook),
                      command=submission.command, home=home_of(notebook, home_path),
                      working_dir=submission.directory,
                      checkpoint_storage=storage, identity=identity_of(notebook))
