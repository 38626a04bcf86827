"""jupyterhub-gpu: shared, queued, autoscaled GPUs for JupyterHub on Kubernetes.

Importing the package does no I/O and loads no kubeconfig.
"""

from .parse import SpecError, load_platform, parse_platform

__all__ = ["SpecError", "configure_hub", "load_platform", "parse_platform"]


def configure_hub(c, platform_file, resume=True):  # noqa: D103 - documented where it lives
    from .hubconfig import configure_hub as _configure_hub

    return _configure_hub(c, platform_file, resume)


configure_hub.__doc__ = "See :func:`jupyterhub_gpu.hubconfig.configure_hub`."
