"""Public path of the authenticator helpers the Helm values use
(``from jupyterhub_gpu.auth import group_names``); they live in :mod:`jupyterhub_gpu.hub.auth`."""

from .hub.auth import GroupNames, group_names

__all__ = ["GroupNames", "group_names"]
