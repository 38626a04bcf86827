"""jupyterhub-idle-culler config file: per-profile cull rules from the GPU spec.

Not a module to import: the culler executes it (traitlets provides ``get_config``)::

    python -m jupyterhub_idle_culler --config=$(python -c \
        "import jupyterhub_gpu.cull.service as s; print(s.CULLER_CONFIG)") \
        --timeout=28800 --cull-every=60

Everything is read from ``JUPYTERHUB_GPU_*`` environment variables; see
:mod:`jupyterhub_gpu.cull.hook` for the list and the hub scopes the culler needs.
A missing or invalid setting or spec stops the culler with the reason.
"""

from jupyterhub_gpu.cull.hook import hook_from_env

c = get_config()  # noqa: F821 - provided by the traitlets config loader
c.IdleCuller.cull_arbiter_hook = hook_from_env()
