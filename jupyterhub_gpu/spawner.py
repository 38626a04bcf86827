"""Public path of GPUSpawner (``c.JupyterHub.spawner_class = "gpu"`` or
``"jupyterhub_gpu.spawner.GPUSpawner"``); it lives in :mod:`jupyterhub_gpu.hub.spawner`."""

from .hub.spawner import GPUSpawner

__all__ = ["GPUSpawner"]
