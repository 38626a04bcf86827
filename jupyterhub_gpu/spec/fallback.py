"""Fallback profiles: one profile, several pools in order of preference.

Kueue tries the flavors of a ClusterQueue's resource group in the order the
ClusterQueue lists them (Kueue's ``concepts/cluster_queue`` page, "FlavorFungibility",
v0.17), and a ClusterQueue has one order for all its workloads. So the order every
team's ClusterQueue lists the pools in (:func:`flavor_order`) must put each fallback
profile's pools in that profile's order; :func:`order_conflicts` names the profiles
whose orders contradict each other. Pure functions of the spec.
"""

from __future__ import annotations

from itertools import combinations
from typing import Iterable, Sequence

from .model import AnyProfile


def _before(profiles: Iterable[AnyProfile], known: set[str]) -> dict[str, set[str]]:
    """For each pool, the pools some profile prefers to it."""
    before: dict[str, set[str]] = {name: set() for name in known}
    for profile in profiles:
        names = [n for n in profile.pool_names if n in known]
        for i, name in enumerate(names):
            before[name].update(names[:i])
    return before


def flavor_order(pools: Sequence[str], profiles: Iterable[AnyProfile]) -> list[str] | None:
    """``pools`` (the spec's order) reordered as little as needed so that each
    profile's pools come in its order of preference: of the pools no profile still
    prefers another unplaced one to, the first in spec order goes next. None when
    the profiles' orders contradict each other (see :func:`order_conflicts`)."""
    before = _before(profiles, set(pools))
    placed: list[str] = []
    left = list(pools)
    while left:
        ready = next((n for n in left if before[n] <= set(placed)), None)
        if ready is None:
            return None
        placed.append(ready)
        left.remove(ready)
    return placed


def _precedes(profile: AnyProfile, first: str, second: str) -> bool:
    names = profile.pool_names
    return first in names and second in names and names.index(first) < names.index(second)


def order_conflicts(profiles: Sequence[AnyProfile], pools: Sequence[str]) -> list[str]:
    """Why no one ClusterQueue order suits every fallback profile, naming them."""
    fallbacks = [p for p in profiles if p.fallback]
    found = []
    for p, q in combinations(fallbacks, 2):
        for a, b in combinations(p.pool_names, 2):
            if _precedes(q, b, a):
                found.append(
                    f"{q.kind} {q.slug!r}: pools: prefers pool {b!r} to {a!r}, but "
                    f"{p.kind} {p.slug!r} prefers {a!r} to {b!r}; every team's ClusterQueue tries "
                    f"its pools in one order, so two profiles cannot prefer them the other "
                    f"way round: give both the same order")
    if not found and flavor_order(pools, fallbacks) is None:
        found.append(f"profiles {', '.join(repr(p.slug) for p in fallbacks)}: pools: their "
                     f"orders of preference form a cycle, so no ClusterQueue order suits "
                     f"them all")
    return found
