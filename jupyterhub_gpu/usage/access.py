"""Who may see which usage rows on the usage page (pure).

* a JupyterHub admin: every team;
* a member of a team's ``leadGroups`` (the platform spec): that team's rows;
* everyone: their own rows.

A page's ``team`` and ``user`` query parameters only narrow what the viewer may see:
asking for a team or user outside it is refused (:class:`NotVisible`), never answered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..spec import Platform
from .ledger import Usage


class NotVisible(Exception):
    """A viewer asked for usage they may not see; the message says what they may."""


@dataclass(frozen=True)
class Viewer:
    name: str
    admin: bool = False
    teams: tuple[str, ...] = ()  # the teams they lead

    @classmethod
    def of(cls, model: Mapping[str, Any], platform: Platform) -> "Viewer":
        """The viewer of a hub user model (``GET /hub/api/user``: name, admin, groups)."""
        groups = frozenset(model.get("groups") or ())
        return cls(model["name"], bool(model.get("admin")),
                   tuple(t.name for t in platform.teams_led_by(groups)))

    def may_see(self, u: Usage) -> bool:
        return self.admin or u.user == self.name or (u.team is not None and u.team in self.teams)

    @property
    def scope(self) -> str:
        """What the viewer sees, in words."""
        if self.admin:
            return "all teams (you are an admin)"
        if self.teams:
            return f"team{'s' if len(self.teams) > 1 else ''} {', '.join(self.teams)} and your own"
        return "your own usage"


@dataclass(frozen=True)
class Selection:
    """A page's narrowing query: one team and/or one user (None: all visible)."""

    team: str | None = None
    user: str | None = None

    def check(self, viewer: Viewer) -> None:
        """Refuse a selection outside what ``viewer`` may see."""
        if viewer.admin:
            return
        if self.team is not None and self.team not in viewer.teams:
            raise NotVisible(f"You may not see team {self.team!r}; you see {viewer.scope}.")
        if (self.user is not None and self.user != viewer.name and self.team is None
                and not viewer.teams):
            raise NotVisible(f"You may not see user {self.user!r}; you see {viewer.scope}.")

    def matches(self, u: Usage) -> bool:
        return ((self.team is None or u.team == self.team)
                and (self.user is None or u.user == self.user))


def visible(rows: Iterable[Usage], viewer: Viewer, selection: Selection) -> list[Usage]:
    """The rows ``viewer`` may see that ``selection`` asks for (raises
    :class:`NotVisible` for a selection outside the viewer's rights)."""
    selection.check(viewer)
    return [u for u in rows if viewer.may_see(u) and selection.matches(u)]


class BadQuery(ValueError):
    """A page's query string that is not one the page takes; the message says why."""


@dataclass(frozen=True)
class Query:
    """A page's query string, parsed: the period (days up to now) and the narrowing."""

    days: int
    selection: Selection

    @classmethod
    def parse(cls, arguments: Mapping[str, Sequence[bytes]], default_days: int,
              max_days: int) -> "Query":
        """The query of a request's ``arguments`` (tornado's ``query_arguments``)."""
        def one(name: str) -> str | None:
            values = arguments.get(name)
            return values[-1].decode() if values else None

        days = one("days") or str(default_days)
        if not days.isdigit() or not 1 <= int(days) <= max_days:
            raise BadQuery(f"days must be a whole number from 1 to {max_days}, got {days!r}")
        return cls(int(days), Selection(one("team") or None, one("user") or None))
