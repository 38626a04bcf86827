"""The GPU kernels' provisioner's entry point, as pyproject.toml declares it, in a
distribution's metadata on ``sys.path`` (what ``pip install`` writes): so that
jupyter_client finds it by name in a checkout run without installing it."""

from __future__ import annotations

import tomllib
from pathlib import Path

GROUP = "jupyter_client.kernel_provisioners"
REPO = Path(__file__).resolve().parents[1]


def declared() -> dict[str, str]:
    """The group's entry points in pyproject.toml: name -> target."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"][GROUP])


def register(site: Path, monkeypatch) -> dict[str, str]:
    """Write them as an installed distribution's in ``site`` and put it on the path."""
    dist = site / "jupyterhub_gpu_kernels_checkout-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jupyterhub-gpu-kernels-checkout\n"
                                   "Version: 0\n")
    entries = declared()
    (dist / "entry_points.txt").write_text(
        f"[{GROUP}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items()))
    monkeypatch.syspath_prepend(str(site))
    return entries
