"""Which profile a user may start: ``authorize`` turns a form post or REST
``user_options`` into a :class:`Grant`, or refuses it (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .model import Platform, Pool, Priority, Profile, Team

ALLOWED_OPTION_KEYS = frozenset({"profile"})


@dataclass(frozen=True)
class UserRef:
    """The JupyterHub user a server is for: only what authorization needs."""

    name: str
    groups: frozenset[str]


@dataclass(frozen=True)
class Grant:
    """A profile a user is allowed to start, with everything it resolves to."""

    profile: Profile
    pool: Pool  # the preferred (or only) pool
    team: Team
    priority: Priority
    fallbacks: tuple[Pool, ...] = ()  # a fallback profile's other pools, in order

    @classmethod
    def of(cls, platform: Platform, profile: Profile, team: Team) -> "Grant":
        """What ``profile`` resolves to for ``team`` (who may use it is
        :func:`authorize`'s to say)."""
        pool, *fallbacks = platform.pools_of(profile)
        return cls(profile, pool, team, platform.priority(profile.priority), tuple(fallbacks))

    @property
    def pools(self) -> tuple[Pool, ...]:
        """Every pool the server may run on, the preferred first."""
        return (self.pool, *self.fallbacks)


class OptionsRejected(ValueError):
    """``user_options`` the user may not have. ``str()`` is safe to show the user;
    ``log_detail`` is for the admin's log."""

    def __init__(self, user_message: str, log_detail: str):
        super().__init__(user_message)
        self.log_detail = log_detail


def _choose_profile(allowed: tuple[Profile, ...], options: Mapping[str, Any]) -> Profile | None:
    slug = options.get("profile")
    if slug is None:
        return next((p for p in allowed if p.default), allowed[0] if allowed else None)
    return next((p for p in allowed if p.slug == slug), None)


def authorize(platform: Platform, user: UserRef, options: Any) -> Grant:
    """Resolve ``options`` (a form post or REST ``user_options``) for ``user``.

    Raises :class:`OptionsRejected` for anything not offered to this user: an unknown
    or forbidden profile, or fields no profile offers.
    """
    who = f"user {user.name!r} (groups: {', '.join(sorted(user.groups)) or 'none'})"
    if not isinstance(options, Mapping):
        raise OptionsRejected("Invalid server options.", f"{who}: options are not a mapping")
    extra = sorted(map(str, set(options) - ALLOWED_OPTION_KEYS))
    if extra:
        raise OptionsRejected(
            f"Unexpected server options: {', '.join(extra)}. Choose a profile on the form.",
            f"{who}: rejected fields not offered by any profile: {extra}")
    team = platform.team_for(user.groups)
    if team is None:
        raise OptionsRejected(
            "Your account is not in any team that may use GPUs. Ask your JupyterHub admin.",
            f"{who}: in no team of the platform spec")
    allowed = platform.profiles_for(user.groups)
    profile = _choose_profile(allowed, options)
    if profile is None:
        slug = options.get("profile")
        known = platform.profile(slug) if isinstance(slug, str) else None
        reason = "is not available to you" if known else "does not exist"
        raise OptionsRejected(
            f"The profile {slug!r} {reason}. Choose one of: "
            f"{', '.join(p.slug for p in allowed) or 'none'}.",
            f"{who}: requested {'forbidden' if known else 'unknown'} profile {slug!r}")
    return Grant.of(platform, profile, team)
