"""JupyterHub roles in a hub's config, shared by the services that give every user a
scope (the ``gpu-jobs`` and ``gpu-usage`` services)."""

from __future__ import annotations


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
