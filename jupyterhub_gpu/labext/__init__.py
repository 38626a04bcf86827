"""GPU status in JupyterLab: a status-bar item and its panel.

* :mod:`.status` -- what the item shows (pure): profile, GPU, its use, the time left
  before the idle cull or the maximum age, in words, and when to warn;
* :mod:`.dcgm` -- the pod's GPU use from Prometheus (DCGM exporter), optional;
* :mod:`.handler` -- the Jupyter Server extension serving it as
  ``GET /jupyterhub-gpu/api/status``;
* ``labextension/`` -- the prebuilt JupyterLab extension (built from the repository's
  ``labextension/`` sources with ``make labextension``), which pip installs into
  ``share/jupyter/labextensions/jupyterhub-gpu-status``.

``etc/jupyter/jupyter_server_config.d/jupyterhub-gpu.json`` (installed by pip)
enables the server extension. Importing this package imports nothing else.
"""

from __future__ import annotations

from pathlib import Path

LABEXTENSION_DIR = Path(__file__).with_name("labextension")


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": "jupyterhub_gpu.labext.handler"}]


def _jupyter_labextension_paths() -> list[dict]:
    """For ``jupyter labextension develop`` (JupyterLab's convention)."""
    from ..contract import LABEXTENSION_NAME

    return [{"src": str(LABEXTENSION_DIR), "dest": LABEXTENSION_NAME}]
