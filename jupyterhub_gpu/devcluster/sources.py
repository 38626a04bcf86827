"""Inputs read from disk: the built binaries, Kueue's and Karpenter's CRDs and Kueue's
webhook manifests.

The binaries and CRDs come from :mod:`jupyterhub_gpu.devcluster.build`. Kueue's
webhook manifests are read from the ``sigs.k8s.io/kueue`` module the build
downloaded (``go env GOMODCACHE``), or fetched with ``go mod download`` if the
module cache was cleaned since.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import build

WEBHOOK_DIR = "config/components/webhook"
# Kueue's CRDs are 1.6 MB of YAML: libyaml parses them ~10x faster than pure Python.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
CRD_DIR = "config/components/crd"


class SourceError(RuntimeError):
    """A binary, CRD or Kueue manifest the dev cluster needs is missing."""


@dataclass(frozen=True)
class KueueSources:
    crds: list[dict]
    crd_kustomization: dict
    webhook_manifests: list[dict]
    webhook_kustomization: dict


def binaries() -> dict[str, Path]:
    """Paths of every built binary; raise SourceError naming what is missing."""
    try:
        paths = build.binaries()
    except build.BuildError as e:
        raise SourceError(str(e)) from e
    missing = sorted(n for n, p in paths.items() if not p.is_file())
    if missing or not build.is_built():
        raise SourceError(
            f"the dev-cluster binaries are not built (missing: {', '.join(missing) or 'Kueue CRDs'}); "
            "run `jupyterhub-gpu devcluster build` first")
    return paths


def _go(*args: str) -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    try:
        proc = subprocess.run([go, *args], capture_output=True, text=True, check=False,
                              env={**os.environ, "GOTOOLCHAIN": "local"})
    except FileNotFoundError as e:
        raise SourceError("`go` is not on PATH; it is needed to locate Kueue's manifests") from e
    if proc.returncode != 0:
        raise SourceError(f"`go {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def kueue_module_dir() -> Path:
    """The extracted ``sigs.k8s.io/kueue`` module of the pinned version."""
    version = build.PINS["kueue"].version
    cached = Path(_go("env", "GOMODCACHE")) / f"sigs.k8s.io/kueue@{version}"
    if (cached / WEBHOOK_DIR / "manifests.yaml").is_file():
        return cached
    info = json.loads(_go("mod", "download", "-json", f"sigs.k8s.io/kueue@{version}"))
    return Path(info["Dir"])


def _yaml_docs(path: Path) -> list[dict]:
    try:
        return [d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if d]
    except (OSError, yaml.YAMLError) as e:
        raise SourceError(f"cannot read {path}: {e}") from e


def crds(component: str) -> list[dict]:
    """The CRDs the build copied from the module of binary ``component``."""
    directory = build.crd_dir(component)
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise SourceError(f"no {component} CRDs in {directory}; run `devcluster build`")
    return [d for f in files for d in _yaml_docs(f)]


def kueue_sources() -> KueueSources:
    module = kueue_module_dir()
    return KueueSources(
        crds=crds("kueue"),
        crd_kustomization=_yaml_docs(module / CRD_DIR / "kustomization.yaml")[0],
        webhook_manifests=_yaml_docs(module / WEBHOOK_DIR / "manifests.yaml"),
        webhook_kustomization=_yaml_docs(module / WEBHOOK_DIR / "kustomization.yaml")[0],
    )
