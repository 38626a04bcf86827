"""The Python environment of our hub image, built here as a venv: what the hub pod
runs on AKS.

helm-values/values.yaml runs our hub image (``config/Dockerfile``): z2jh's hub image
``quay.io/jupyterhub/k8s-hub:4.4.0`` with this package installed on top. z2jh builds
that base from the chart's ``images/hub/Dockerfile`` (jupyterhub/zero-to-jupyterhub-k8s
4.4.0): ``python:3.12``, then ``pip install -r requirements.txt``, the frozen pins
(JupyterHub 5.5.0, KubeSpawner 7.0.0, jupyterhub-idle-culler 1.4.0, ...). Our
Dockerfile's ``RUN`` then installs the package with ``--upgrade-strategy
only-if-needed``, which keeps every pin our requirements allow and upgrades only
what they forbid (the ``[culler]`` extra's jupyterhub-idle-culler 2.x).

:func:`hub_image_venv` makes the same environment: a venv of the base image's Python
minor (read from its Dockerfile's last ``FROM python:``; this machine's nearest
interpreter of that minor, else the running one, :func:`image_python`), the pins
installed from the reference ``requirements.txt``, then our Dockerfile's ``COPY``
lines played into a staging directory and its ``pip install`` ``RUN`` line run as
written, with that directory in place of the image's. It is cached under the dev
cluster's cache (``~/.cache/jupyterhub-gpu/hub-image/<key>``), keyed by the hash of
everything that decides its contents: the requirements, both Dockerfiles, our
``pyproject.toml`` and the interpreter's version. The package's own
code is not in the key: the hub started with this venv puts the checkout first on
``PYTHONPATH`` (:mod:`.chart_hub`), so the installed copy gives only the metadata
(entry points, the dependencies resolved against the pins).

A chart test module runs its hub in it with ``chart_hub.serving(...,
python_bin=python_bin(IMAGE_PINS))``, or in both environments by giving its
module-scoped hub fixture the params ``IMAGE_PINS``/``VENV_PINS`` (test_chart_home.py:
``indirect`` and ``scope="module"`` on the parametrize, so that each hub starts once).

What differs from the image: the base's wheels come from the package index, not from
its build stage (same versions; pycurl as a wheel, where z2jh builds it from source),
and the default stage's ``py-spy`` and Debian tools are left out (no hub code uses
them).
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyterhub_gpu.devcluster import build

from .. import z2jh_chart

REPO = z2jh_chart.REPO
IMAGE_DIR = z2jh_chart.REFERENCE / "chart" / "images" / "hub"
REQUIREMENTS = IMAGE_DIR / "requirements.txt"
BASE_DOCKERFILE = IMAGE_DIR / "Dockerfile"
OUR_DOCKERFILE = REPO / "config" / "Dockerfile"
#: what decides the venv's contents (besides the interpreter's version)
KEYED = (REQUIREMENTS, BASE_DOCKERFILE, OUR_DOCKERFILE, REPO / "pyproject.toml")
INFO = "hub-image.json"  # in the venv: the interpreter, the build time, what pip changed


def missing() -> str | None:
    """Why the venv cannot be built here, or None."""
    absent = [p for p in (REQUIREMENTS, BASE_DOCKERFILE) if not p.is_file()]
    return (f"the z2jh hub image's files are not beside the checkout: "
            f"{', '.join(map(str, absent))}") if absent else None


def base_python_minor(dockerfile: str) -> str:
    """The Python minor of the image's final stage (its last ``FROM python:X.Y...``)."""
    found = re.findall(r"^FROM\s+python:(\d+\.\d+)", dockerfile, re.MULTILINE)
    if not found:
        raise ValueError("the hub image's Dockerfile has no FROM python:X.Y stage")
    return found[-1]


def _version(python: str) -> str | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def image_python(minor: str) -> tuple[str, str]:
    """(interpreter, version): ``python<minor>`` on PATH or a pyenv install of that
    minor, else the running interpreter."""
    pyenv = Path.home() / f".pyenv/versions/{minor}.*/bin/python{minor}"
    candidates = [shutil.which(f"python{minor}"), *sorted(glob.glob(str(pyenv)), reverse=True)]
    for python in filter(None, candidates):
        version = _version(python)
        if version and version.startswith(f"{minor}."):
            return python, version
    return sys.executable, sys.version.split()[0]


def dockerfile_copies(dockerfile: str) -> list[tuple[list[str], str]]:
    """The ``COPY`` lines: (sources in the build context, destination)."""
    out = []
    for line in _instructions(dockerfile):
        if line.startswith("COPY "):
            *sources, dest = shlex.split(line[len("COPY "):])
            out.append((sources, dest))
    return out


def pip_run(dockerfile: str) -> str:
    """The shell command of the ``RUN`` line that pip-installs the package."""
    (command,) = [line[len("RUN "):] for line in _instructions(dockerfile)
                  if line.startswith("RUN ") and "pip install" in line]
    return command


def _instructions(dockerfile: str) -> list[str]:
    """Each instruction on one line (continuations joined, comments dropped)."""
    lines = [line for line in dockerfile.splitlines() if not line.lstrip().startswith("#")]
    return [i.strip() for i in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines() if i.strip()]


def stage(copies: list[tuple[list[str], str]], into: Path) -> str:
    """Play the ``COPY`` lines into ``into``, which stands for the destinations'
    common directory; that directory's path in the image."""
    root = os.path.commonpath([dest.rstrip("/") for _, dest in copies])
    for sources, dest in copies:
        target = into / os.path.relpath(dest.rstrip("/"), root)
        for source in sources:
            src = REPO / source
            where = target / src.name if dest.endswith("/") else target
            if src.is_dir():  # copytree makes the parents
                shutil.copytree(src, where, ignore=shutil.ignore_patterns("__pycache__"))
                continue
            where.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, where)
    return root


def cache_key(version: str) -> str:
    digest = hashlib.sha256(version.encode())
    for path in KEYED:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _run(argv: list[str], env: dict[str, str], log) -> None:
    log.write(f"$ {shlex.join(argv)}\n".encode())
    log.flush()
    # outside the checkout: ``python3 -c "import ..."`` must find the installed copy
    out = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, check=False,
                         cwd=build.cache_root())
    if out.returncode:
        raise RuntimeError(f"building the hub image's venv failed: {shlex.join(argv)} "
                           f"exited {out.returncode} (log: {log.name})")


def _freeze(venv: Path, env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
                         env=env, capture_output=True, text=True, check=True)
    return {p["name"].lower(): p["version"] for p in json.loads(out.stdout)}


def _build(venv: Path, python: str, version: str, log) -> dict:
    """The venv at ``venv``: the base image's pins, then our Dockerfile's install."""
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    _run([python, "-m", "venv", str(venv)], env, log)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    _run([*pip, "install", "--no-input", "-r", str(REQUIREMENTS)], env, log)
    pinned = _freeze(venv, env)
    ours = OUR_DOCKERFILE.read_text()
    staging = venv.parent / f"{venv.name}.context"
    shutil.rmtree(staging, ignore_errors=True)
    root = stage(dockerfile_copies(ours), staging)
    _run(["sh", "-c", pip_run(ours).replace(root, str(staging))], env, log)
    shutil.rmtree(staging, ignore_errors=True)
    check = subprocess.run([*pip, "check"], env=env, capture_output=True, text=True)
    final = _freeze(venv, env)
    return {"python": python, "version": version,
            "build_seconds": round(time.monotonic() - started, 1),
            "pip_check": check.stdout.strip() if check.returncode else "",
            "changed": {name: [pinned[name], v] for name, v in final.items()
                        if name in pinned and pinned[name] != v},
            "added": sorted(set(final) - set(pinned)),
            "packages": final}


def hub_image_venv(progress=print) -> Path:
    """The venv (built on first use, then cached; one build at a time across
    processes); its ``hub-image.json`` says how it was made."""
    reason = missing()
    if reason:
        raise FileNotFoundError(reason)
    python, version = image_python(base_python_minor(BASE_DOCKERFILE.read_text()))
    cache = build.cache_root() / "hub-image"
    venv = cache / cache_key(version)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / INFO).is_file():
            progress(f"building the hub image's venv in {venv} (python {version}; "
                     f"log {venv}.log)")
            shutil.rmtree(venv, ignore_errors=True)
            with open(f"{venv}.log", "wb") as log:
                info = _build(venv, python, version, log)
            (venv / INFO).write_text(json.dumps(info, indent=1, sort_keys=True))
            progress(f"the hub image's venv took {info['build_seconds']} s")
    return venv


def info(venv: Path) -> dict:
    return json.loads((venv / INFO).read_text())


#: the Python environments a chart test module may run its hub in: our hub image's
#: (what an admin's hub pod runs) and this one's (the newest pins, as the rest of the
#: cluster tier); a module's hub fixture takes one as its param (:func:`python_bin`)
IMAGE_PINS, VENV_PINS = "image-pins", "venv-pins"


def python_bin(pins: str) -> Path | None:
    """The ``bin`` directory for :func:`.chart_hub.serving`: the hub image's venv
    (built if needed; the test skips, saying why, when the image's files are absent)
    for ``IMAGE_PINS``, None (this environment) for ``VENV_PINS``."""
    if pins == VENV_PINS:
        return None
    reason = missing()
    if reason:
        pytest.skip(reason)
    return hub_image_venv() / "bin"
