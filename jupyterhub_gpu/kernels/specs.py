"""GPU kernelspecs: one per GPU profile a user may use (docs/kernels.md, "The user's
view"), each naming the GPU kernels' provisioner and its profile.

* :func:`kernelspec` (pure): a profile's ``kernel.json``: "Python 3 — <profile>", the
  provisioner :data:`~jupyterhub_gpu.contract.KERNEL_PROVISIONER_NAME` with the
  profile's slug in its config, ``interrupt_mode: message`` (the kernel is in another
  pod: no signal reaches it), and the profile's facts in ``metadata``;
* :func:`user_kernelspecs`: those of the GPU profiles a user's groups may use, which
  the ``gpu-kernels`` service answers at ``GET api/kernelspecs``;
* :func:`write_kernelspecs`: written as kernelspec directories (``<dir>/<name>/kernel.json``),
  which the server's extension (:mod:`jupyterhub_gpu.kernels.server_ext`) does in a
  directory of Jupyter's kernel search path.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..builders.kernel import LAUNCHER_MODULE, PYTHON
from ..contract import KERNEL_PROVISIONER_NAME
from ..spec.model import Platform, Profile

#: a GPU kernelspec's name: this and the profile's slug
NAME_PREFIX = "gpu-"
#: the metadata key of the profile's facts in a kernelspec
FACTS_KEY = "jupyterhub_gpu"
#: what a kernelspec's name may be (Jupyter: letters, digits, ``.``, ``_``, ``-``)
_NAME = re.compile(r"[a-z0-9._-]{1,128}")
#: the command a kernelspec names: what the kernel's pod runs (the kernel manager only
#: logs it; the provisioner starts no local process)
ARGV = (PYTHON, "-m", LAUNCHER_MODULE)


def spec_name(profile: Profile) -> str:
    return f"{NAME_PREFIX}{profile.slug}"


def kernelspec(platform: Platform, profile: Profile) -> dict[str, Any]:
    """The ``kernel.json`` of GPU kernels of ``profile`` (a GPU profile)."""
    pools = platform.pools_of(profile)
    if not any(p.has_gpu for p in pools):
        raise ValueError(f"profile {profile.slug!r} has no GPU, so it has no GPU kernel")
    prices = sorted({round(p.price_per_unit_hour * profile.units, 2) for p in pools})
    return {
        "argv": list(ARGV),
        "display_name": f"Python 3 — {profile.display_name}",
        "language": "python",
        "interrupt_mode": "message",
        "metadata": {
            "kernel_provisioner": {"provisioner_name": KERNEL_PROVISIONER_NAME,
                                   "config": {"profile": profile.slug}},
            FACTS_KEY: {"profile": profile.slug, "description": profile.description,
                        "gpu": " or ".join(dict.fromkeys(p.gpu.name for p in pools)),
                        "gpus": profile.units, "price_per_hour": prices,
                        "idle_timeout_seconds": profile.kernel_idle_timeout_seconds},
        },
    }


def user_kernelspecs(platform: Platform, profiles: Iterable[Profile]) -> dict[str, dict]:
    """Name -> kernelspec of each of ``profiles`` that runs on a GPU."""
    return {spec_name(p): kernelspec(platform, p) for p in profiles if platform.uses_gpu(p)}


def write_kernelspecs(directory: Path, specs: Mapping[str, Any]) -> list[str]:
    """Make ``directory`` hold exactly ``specs`` as kernelspec directories (those of an
    earlier call no longer given are removed); the names written. A name or spec not
    of the shape :func:`user_kernelspecs` gives is skipped."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = {name: spec for name, spec in specs.items()
              if isinstance(name, str) and _NAME.fullmatch(name)
              and name.startswith(NAME_PREFIX) and isinstance(spec, Mapping)
              and (spec.get("metadata") or {}).get("kernel_provisioner", {}).get(
                  "provisioner_name") == KERNEL_PROVISIONER_NAME}
    for old in directory.iterdir():
        if old.is_dir() and old.name not in wanted:
            shutil.rmtree(old)
    for name, spec in wanted.items():
        (directory / name).mkdir(exist_ok=True)
        (directory / name / "kernel.json").write_text(json.dumps(spec, indent=1))
    return sorted(wanted)
