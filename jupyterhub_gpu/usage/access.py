"""Who may see which usage rows on the usage page (pure).

* a JupyterHub admin: every team;
* a member of a team's ``leadGroups`` (the platform spec): that team's rows;
* everyone: their own rows.

A page's ``team`` and ``user`` query parameters only narrow what the viewer may see:
asking for a team or user outside it is refused (:class:`NotVisible`), never answered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..spec.model import Platform
from ..ledger.store import NAME_CHARS, Usage


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

    def asks_for_another_user(self, viewer: Viewer) -> bool:
        """Whether this narrows a lead's view to someone else: answered only with rows
        of that user the lead may see, else refused (so that a user of another team
        gets 403, not an empty page, and the answer depends on visible rows alone)."""
        return not viewer.admin and self.user is not None and self.user != viewer.name

    def matches(self, u: Usage) -> bool:
        return ((self.team is None or u.team == self.team)
                and (self.user is None or u.user == self.user))


def visible(rows: Iterable[Usage], viewer: Viewer, selection: Selection) -> list[Usage]:
    """The rows ``viewer`` may see that ``selection`` asks for (raises
    :class:`NotVisible` for a selection outside the viewer's rights)."""
    selection.check(viewer)
    shown = [u for u in rows if viewer.may_see(u) and selection.matches(u)]
    if not shown and selection.asks_for_another_user(viewer):
        raise NotVisible(f"You may not see user {selection.user!r}: you see {viewer.scope}, "
                         f"and they have no usage there in this period.")
    return shown


class BadQuery(ValueError):
    """A page's query string that is not one the page takes; the message says why."""


#: the query parameters of the page and its CSV
PARAMETERS = ("days", "team", "user")
_DAYS = re.compile(r"[0-9]+")  # ASCII digits only (str.isdigit also takes '²')
_QUOTED = 40  # the most characters of a bad value a message repeats


def _shown(text: str) -> str:
    return repr(text if len(text) <= _QUOTED else text[:_QUOTED] + "...")


def _value(arguments: Mapping[str, Sequence[bytes]], name: str) -> str | None:
    """Parameter ``name``'s value (None or empty: not given); given once, UTF-8 text of
    at most NAME_CHARS printable characters."""
    values = arguments.get(name) or ()
    if len(values) > 1:
        raise BadQuery(f"give {name} once, not {len(values)} times")
    if not values or not values[0]:
        return None
    if len(values[0]) > 4 * NAME_CHARS:  # no decoding of a huge value to refuse it
        raise BadQuery(f"{name} is longer than {NAME_CHARS} characters")
    try:
        text = values[0].decode("utf-8")
    except UnicodeDecodeError:
        raise BadQuery(f"{name} is not UTF-8") from None
    if len(text) > NAME_CHARS:
        raise BadQuery(f"{name} is longer than {NAME_CHARS} characters")
    if not text.isprintable():
        raise BadQuery(f"{name} has a character that is not printable: {_shown(text)}")
    return text


@dataclass(frozen=True)
class Query:
    """A page's query string, parsed: the period (days up to now) and the narrowing."""

    days: int
    selection: Selection

    @classmethod
    def parse(cls, arguments: Mapping[str, Sequence[bytes]], default_days: int,
              max_days: int) -> "Query":
        """The query of a request's ``arguments`` (tornado's ``query_arguments``: each
        name's raw values); raises :class:`BadQuery` for anything else."""
        for name in arguments:
            if name not in PARAMETERS:
                raise BadQuery(f"unknown query parameter {_shown(name)}; the page takes "
                               f"{', '.join(PARAMETERS)}")
        rule = f"days must be a whole number from 1 to {max_days}"
        try:
            days = _value(arguments, "days")
        except BadQuery as e:
            raise BadQuery(f"{rule} ({e})") from None
        if days is not None and not (_DAYS.fullmatch(days) and 1 <= int(days) <= max_days):
            raise BadQuery(f"{rule}, got {_shown(days)}")
        return cls(default_days if days is None else int(days),
                   Selection(_value(arguments, "team"), _value(arguments, "user")))
