"""What the demo's stand-in kubelet runs for a training Job's pod (pure, no I/O).

kwok marks a Job's pod Running and, with the
:data:`~jupyterhub_gpu.devcluster.contract.RUN_FOR_ANNOTATION`, succeeds it after that long
(:mod:`jupyterhub_gpu.devcluster.stages`). A Job pod without it is the pod runner's
(:mod:`jupyterhub_gpu.devcluster.podrunner`): it runs the container's command as a
real process, and its exit code becomes the pod's result through kwok (the runner
writes :data:`~jupyterhub_gpu.devcluster.contract.EXIT_CODE_ANNOTATION`, a kwok stage turns it
into phase Succeeded or Failed with that container exit code), so the Job's
``podFailurePolicy`` sees a real exit code.

The pod's persistent volumes become directories under the runner's workdir, one per
claim and ``subPath`` (``volumes/<namespace>/<claim>/<subPath>``): a pod recreated
for the same Job (after a disruption) sees what the first one wrote, as on a real
PVC. Paths under a mount in the container's command, working directory and
environment (``CHECKPOINT_DIR``, ``HOME``) are translated to those directories.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Mapping

from ..builders.job import HOME_VOLUME
from ..contract import (COMPONENT_LABEL, ENV_HOSTNAME, JOB_COMPONENT, KERNEL_COMPONENT,
                        USERNAME_KEY)
from .contract import RUN_FOR_ANNOTATION

VOLUMES_DIR = "volumes"


@dataclass(frozen=True)
class Mount:
    """A container path backed by a directory of the runner's (relative to its
    workdir)."""

    container_path: str
    host_dir: str


@dataclass(frozen=True)
class JobProcess:
    """What to run for one Job pod."""

    key: str  # namespace/name/uid
    user: str
    argv: tuple[str, ...]
    env: Mapping[str, str]  # the pod's, paths already translated
    cwd: str  # relative to the runner's workdir
    home: str  # relative to the runner's workdir
    grace_seconds: int
    mounts: tuple[Mount, ...] = ()


#: the pods whose container's command the runner runs: training Jobs' pods and GPU
#: kernels' pods (the kernel launcher, :mod:`jupyterhub_gpu.kernels.launcher`)
RUN_COMPONENTS = (JOB_COMPONENT, KERNEL_COMPONENT)


def is_runner_job(pod: Mapping) -> bool:
    """A pod the runner runs the command of: a Job's (``component=gpu-job``) or a GPU
    kernel's (``component=gpu-kernel``), without a run-for annotation (those kwok
    finishes on its own)."""
    meta = pod.get("metadata") or {}
    return ((meta.get("labels") or {}).get(COMPONENT_LABEL) in RUN_COMPONENTS
            and RUN_FOR_ANNOTATION not in (meta.get("annotations") or {}))


def mounts_of(pod: Mapping) -> tuple[Mount, ...]:
    """The first container's mounts of persistent volume claims, as directories: one
    per namespace, claim and subPath, the longest container path first."""
    meta, spec = pod["metadata"], pod["spec"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in spec.get("volumes") or [] if v.get("persistentVolumeClaim")}
    found = []
    for mount in spec["containers"][0].get("volumeMounts") or []:
        claim = claims.get(mount["name"])
        if claim is None:
            continue
        host = PurePosixPath(VOLUMES_DIR, meta["namespace"], claim, mount.get("subPath") or "")
        found.append(Mount(mount["mountPath"].rstrip("/") or "/", str(host)))
    return tuple(sorted(found, key=lambda m: -len(m.container_path)))


def translate(path: str, mounts: tuple[Mount, ...]) -> str | None:
    """``path`` in the container as a path relative to the runner's workdir, or None
    when it is under no mount."""
    for mount in mounts:
        inside = PurePosixPath(path)
        base = PurePosixPath(mount.container_path)
        if inside == base or base in inside.parents:
            return str(PurePosixPath(mount.host_dir, inside.relative_to(base)))
    return None


def _in_workdir(value: str, mounts: tuple[Mount, ...], workdir: str) -> str:
    """``value`` with a leading mounted path replaced by its directory's."""
    if not value.startswith("/"):
        return value
    moved = translate(value, mounts)
    return value if moved is None else str(PurePosixPath(workdir, moved))


def job_process(pod: Mapping, env: Mapping[str, str], workdir: str) -> JobProcess | None:
    """The process a running Job pod needs (``env``: its container's environment as
    the kubelet resolves it), or None when the runner should run none for it."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    if (not is_runner_job(pod) or meta.get("deletionTimestamp")
            or status.get("phase") != "Running"):
        return None
    container = spec["containers"][0]
    mounts = mounts_of(pod)
    key = f"{meta['namespace']}/{meta['name']}/{meta['uid']}"
    private = str(PurePosixPath("run", key.replace("/", "_")))  # no home volume: its own
    working = container.get("workingDir")
    cwd = (translate(working, mounts) if working else None) or private
    # HOME is the image's (/home/jovyan): the home volume's mount, whichever
    # directory of it the job works in
    home_mount = next((m["mountPath"] for m in container.get("volumeMounts") or ()
                       if m["name"] == HOME_VOLUME), None)
    home = (translate(home_mount, mounts) if home_mount else None) or cwd
    argv = tuple(_in_workdir(a, mounts, workdir)
                 for a in (*container.get("command", ()), *container.get("args", ())))
    translated = {k: _in_workdir(v, mounts, workdir) for k, v in env.items()}
    translated.setdefault("HOME", str(PurePosixPath(workdir, home)))
    translated[ENV_HOSTNAME] = meta["name"]
    grace = int(spec.get("terminationGracePeriodSeconds", 30))
    user = (meta.get("labels") or {}).get(USERNAME_KEY, meta["name"])
    return JobProcess(key, user, argv, translated, cwd, home, grace, mounts)


def result_annotation(code: int) -> str:
    """A process's exit status as the annotation's value: a signal's death (negative
    in Python) as a shell reports it, 128 + the signal."""
    return str(code if code >= 0 else 128 - code)
