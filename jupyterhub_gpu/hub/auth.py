"""JupyterHub groups from Entra ID (Azure AD) tokens that carry group object IDs.

With ``groupMembershipClaims=SecurityGroup`` the ID token's ``groups`` claim lists
the object IDs of the user's security groups, not their names. The spec's
``groupIds`` maps the names its teams and profiles use to those IDs, and
:func:`group_names` makes OAuthenticator name the user's JupyterHub groups by them,
so ``allowed_groups`` (generated from the spec), the admin panel and the spawn form
all speak of ``data-science``, not of ``2f1c8a3e-…``. In ``jupyterhub_config.py``
(``hub.extraConfig`` with z2jh; ``helm-values/auth-azuread.yaml`` does this)::

    from jupyterhub_gpu.hub.auth import group_names
    c.AzureAdOAuthenticator.auth_state_groups_key = group_names(
        "/etc/jupyterhub-gpu/platform.yaml")

It needs ``c.OAuthenticator.manage_groups = True`` (``helm-values/generated.yaml``
sets it). A group the spec does not name keeps its object ID as its name.
"""

from __future__ import annotations

from typing import Any, Mapping

from traitlets.log import get_logger

from ..spec.parse import load_platform

# AzureAdOAuthenticator keeps the decoded ID token as auth_state["user"]
TOKEN_KEY = "user"
GROUPS_CLAIM = "groups"


class GroupNames:
    """``OAuthenticator.auth_state_groups_key``: the token's groups, IDs named."""

    def __init__(self, group_ids: Mapping[str, str]):
        self.names = {oid.lower(): name for name, oid in group_ids.items()}

    def __call__(self, auth_state: Mapping[str, Any]) -> list[str]:
        claims = auth_state.get(TOKEN_KEY) or {}
        groups = claims.get(GROUPS_CLAIM)
        if groups is None:
            self._no_groups_claim(claims)
            return []
        return sorted({self.names.get(str(g).lower(), str(g)) for g in groups})

    @staticmethod
    def _no_groups_claim(claims: Mapping[str, Any]) -> None:
        who = claims.get("preferred_username") or claims.get("oid") or "a user"
        overage = GROUPS_CLAIM in (claims.get("_claim_names") or {})
        get_logger().warning(
            "The Entra ID token of %s has no %r claim%s, so they are in no JupyterHub "
            "group and may start no GPU profile. Set groupMembershipClaims on the app "
            "registration (SecurityGroup, or ApplicationGroup for only the groups "
            "assigned to the app).", who, GROUPS_CLAIM,
            " (group overage: they are in more groups than a token lists)" if overage else "")


def group_names(platform_file: str) -> GroupNames:
    """The groups callable for the spec at ``platform_file`` (its ``groupIds``)."""
    return GroupNames(load_platform(platform_file).group_ids)
