"""JupyterHub services and roles in a hub's config: what every ``add_*_service`` helper
(gpu-resume, the culler, gpu-jobs, gpu-kernels, gpu-usage) shares, so each adds its service the same
way and takes the spec's path from what ``configure_hub`` recorded."""

from __future__ import annotations

import os
from typing import Any

#: JupyterHub's default scopes of a server's token (its ``server`` role)
SERVER_TOKEN_SCOPES = ("users:activity!user", "access:servers!server")


def record_spec_path(c: Any, platform_file: str) -> None:
    """Where ``configure_hub`` keeps the spec's path: GPUSpawner's ``platform_file``."""
    c.GPUSpawner.platform_file = platform_file


def spec_path(c: Any, platform_file: str | None, helper: str) -> str:
    """``platform_file`` if given, else the path ``configure_hub`` recorded in ``c``; as
    an absolute path (a managed service may start elsewhere than the hub)."""
    path = platform_file or c.get("GPUSpawner", {}).get("platform_file")
    if not path:
        raise ValueError(f"{helper} needs the spec's path: call configure_hub(c, <spec path>) "
                         f"before it, or pass platform_file")
    return os.path.abspath(path)


def add_service(c: Any, service: dict, role: dict | None = None) -> None:
    """Add ``service`` to ``c.JupyterHub.services`` and ``role``, if any, to its
    ``load_roles``, keeping what the config (the chart's ``hub.services``) set before.

    A service or role of the same name already there is replaced in its place, not
    added twice (JupyterHub refuses a role named twice at start-up): a later
    ``add_*_service`` call, e.g. in an admin's own ``hub.extraConfig`` entry after the
    values' one, changes the service's settings. Keys of an earlier service entry that
    ``service`` does not set (the chart's ``api_token``) are kept."""
    c.JupyterHub.services = _put(c.JupyterHub.get("services", []), service, merge=True)
    if role is not None:
        c.JupyterHub.load_roles = _put(c.JupyterHub.get("load_roles", []), role, merge=False)


def _put(entries: list[dict], entry: dict, merge: bool) -> list[dict]:
    """``entries`` with ``entry`` in the place of the one of its name (over it, with
    ``merge``), else at the end."""
    first = next((e for e in entries if e.get("name") == entry["name"]), None)
    if first is None:
        return [*entries, entry]
    return [({**first, **entry} if merge else entry) if e is first else e
            for e in entries if e is first or e.get("name") != entry["name"]]


def with_user_scope(roles: list[dict], scope: str) -> list[dict]:
    """``roles`` with ``scope`` in the ``user`` role (JupyterHub's default one, ``self``,
    unless the config already redefines it)."""
    roles = [dict(r) for r in roles]
    user = next((r for r in roles if r.get("name") == "user"), None)
    if user is None:
        roles.append({"name": "user", "scopes": ["self", scope]})
    elif scope not in user.get("scopes", []):
        user["scopes"] = [*user.get("scopes", ["self"]), scope]
    return roles


def add_server_scope(c: Any, scope: str) -> None:
    """Add ``scope`` to the scopes of every server's token (``server_token_scopes``,
    JupyterHub's defaults if the config sets none; a callable the config set is left
    as it is)."""
    scopes = (c.KubeSpawner.get("server_token_scopes") or c.Spawner.get("server_token_scopes")
              or list(SERVER_TOKEN_SCOPES))
    if not callable(scopes) and scope not in scopes:
        c.KubeSpawner.server_token_scopes = [*scopes, scope]
