"""The files pip installs outside the package, into the notebook image's prefix.

pyproject.toml's ``[tool.setuptools.data-files]`` lists them for pip; this module lists the same
(``tests/unit/test_packaging.py`` checks that the two and the wheel agree) for the
dev cluster's pod runner, which runs the notebooks from an editable install, where
pip installs none of them: :func:`lay_out` links them into a prefix of its own.

* ``etc/jupyter/jupyter_server_config.d``: enables the Jupyter Server extensions
  (the cull notices, the GPU status);
* ``share/jupyter/lab/settings/overrides.d``: JupyterLab settings the notices need;
* ``share/jupyter/labextensions/jupyterhub-gpu-status``: the prebuilt JupyterLab
  extension (the status-bar item).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .contract import LABEXTENSION_NAME

PACKAGE = Path(__file__).resolve().parent
LABEXTENSIONS = "share/jupyter/labextensions"

#: install directory (relative to the prefix) -> files (globs, relative to the package)
DATA_FILES: dict[str, tuple[str, ...]] = {
    "etc/jupyter/jupyter_server_config.d": (
        "cull/etc/jupyter_server_config.d/jupyterhub-gpu.json",),
    "share/jupyter/lab/settings/overrides.d": (
        "cull/etc/lab_settings_overrides.d/jupyterhub-gpu.json",),
    f"{LABEXTENSIONS}/{LABEXTENSION_NAME}": ("labext/labextension/package.json",),
    f"{LABEXTENSIONS}/{LABEXTENSION_NAME}/static": ("labext/labextension/static/*",),
}


def files() -> dict[str, list[Path]]:
    """Each install directory's files, as they are in this package now."""
    return {target: sorted(f for pattern in patterns for f in PACKAGE.glob(pattern))
            for target, patterns in DATA_FILES.items()}


def lay_out(prefix: Path) -> Path:
    """Copy every data file into ``prefix`` as pip would install it; returns ``prefix``.

    Files left from an earlier build (a rebuilt labextension's old chunks) go."""
    for target, sources in files().items():
        folder = prefix / target
        folder.mkdir(parents=True, exist_ok=True)
        wanted = {source.name: source for source in sources}
        for old in folder.iterdir():
            if old.is_file() and old.name not in wanted:
                old.unlink()
        for name, source in wanted.items():
            shutil.copyfile(source, folder / name)
    return prefix
