"""Sphinx configuration: MyST Markdown pages; the trait reference is generated.

Build (warnings are errors, as in CI):  sphinx-build -W -b html docs docs/_build/html
"""

from __future__ import annotations

project = "jupyterhub-gpu"
author = "jupyterhub-gpu contributors"
copyright = "jupyterhub-gpu contributors"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]

GENERATED_AT_BUILD = "reference/traits"


def _generate(app, docname: str, source: list[str]) -> None:
    """``reference/traits`` is written from the installed GPUSpawner and KubeSpawner."""
    if docname == GENERATED_AT_BUILD:
        from jupyterhub_gpu.bundle.reference import traits_reference

        source[0] = traits_reference()


def setup(app):
    app.connect("source-read", _generate)
    return {"parallel_read_safe": True}
