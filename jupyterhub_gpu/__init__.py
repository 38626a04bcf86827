"""jupyterhub-gpu: shared, queued, autoscaled GPUs for JupyterHub on Kubernetes.

Importing the package does no I/O, loads no kubeconfig and imports none of its
modules: ``configure_hub`` and the spec loaders below are loaded when first used, so
the notebook side (:mod:`jupyterhub_gpu.checkpoint`) loads neither yaml nor the spec.

The parts, a package each: :mod:`.spec` (the platform spec), :mod:`.builders` (pure
manifests), :mod:`.kueue` (the queue, in users' words), :mod:`.watches` (the hub's
shared watches), :mod:`.hub` (GPUSpawner and the hub process), the services
:mod:`.cull`, :mod:`.jobs` and :mod:`.usage` with the :mod:`.ledger` they write,
the notebook side :mod:`.labext` (and :mod:`.checkpoint`), and the tools
:mod:`.bundle`, :mod:`.devcluster` and :mod:`.replay`.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["SpecError", "configure_hub", "load_platform", "parse_platform"]

#: public name -> the module that defines it
_LAZY = {
    "SpecError": "jupyterhub_gpu.spec.parse",
    "load_platform": "jupyterhub_gpu.spec.parse",
    "parse_platform": "jupyterhub_gpu.spec.parse",
    "configure_hub": "jupyterhub_gpu.hub.config",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
