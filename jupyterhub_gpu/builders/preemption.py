"""The one preemption model the platform runs Kueue with: classical preemption.

Kueue picks what to preempt across the ClusterQueues of a cohort in one of two ways
(Kueue's ``concepts/preemption`` page and ``ClusterQueuePreemption`` API, v0.17):

* **classical preemption**: each ClusterQueue's ``withinClusterQueue``,
  ``reclaimWithinCohort`` and ``borrowWithinCohort`` say whom its workloads may
  preempt, by priority;
* **fair sharing**, on for all of Kueue as soon as its Configuration has a
  ``fairSharing`` section: candidates are chosen by each queue's weighted dominant
  resource share (``fairSharing.weight``), and ``borrowWithinCohort`` is ignored.

The spec drives classical preemption (why: ``docs/bundle.md``, "Preemption"), so the
builders generate only the fields it reads, and :func:`ignored_fields` finds those a
given Configuration would make Kueue ignore.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..spec.model import Platform

CLASSICAL = "classical preemption"
FAIR_SHARING = "fair sharing"
MODEL = CLASSICAL
"""The model the builders generate for (the shipped Configuration has no ``fairSharing``)."""

FAIR_SHARING_KEY = "fairSharing"  # in Kueue's Configuration: present = fair sharing on

_WEIGHT_IGNORED = "a fair-sharing weight; Kueue reads it only with fair sharing on"
IGNORED: dict[str, tuple[tuple[str, str, str], ...]] = {
    CLASSICAL: (
        ("ClusterQueue", "spec.fairSharing", _WEIGHT_IGNORED),
        ("Cohort", "spec.fairSharing", _WEIGHT_IGNORED),
    ),
    FAIR_SHARING: (
        ("ClusterQueue", "spec.preemption.borrowWithinCohort",
         "Kueue documents borrowWithinCohort as valid only with classical preemption, "
         "not with fair sharing"),
    ),
}
"""Per model: (kind, field, why) of the fields Kueue does not act on under it."""


def model_of(configuration: Mapping) -> str:
    """The model Kueue runs with ``configuration`` (Kueue only checks that
    ``fairSharing`` is set; its strategies default when empty)."""
    return FAIR_SHARING if configuration.get(FAIR_SHARING_KEY) is not None else CLASSICAL


def cluster_queue_preemption(platform: Platform) -> dict:
    """A team's ClusterQueue ``preemption``, for classical preemption:

    * ``withinClusterQueue: LowerPriority``: in a team, a higher-priority notebook
      may preempt a lower-priority one when the team's quota is used up;
    * ``reclaimWithinCohort: Any``: a team that wants its own (nominal) quota back
      preempts the notebooks other teams run on it, whatever their priority;
    * ``borrowWithinCohort`` (only if some priority is preemptible): a notebook that
      must itself borrow may preempt another borrowing team's notebooks of lower
      priority, up to the highest preemptible priority -- never anything above it.
    """
    policy: dict = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    preemptible = [p.value for p in platform.priorities if p.preemptible]
    if preemptible:
        policy["borrowWithinCohort"] = {"policy": "LowerPriority",
                                        "maxPriorityThreshold": max(preemptible)}
    return policy


def _lookup(obj: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(obj, Mapping) or key not in obj:
            return None
        obj = obj[key]
    return obj


def ignored_fields(configuration: Mapping,
                   objects: Iterable[Any]) -> list[tuple[str, str, Any, str]]:
    """``(object, field, value, why)`` for every field of the Kueue ``objects`` that
    Kueue, run with ``configuration``, does not act on."""
    rules = IGNORED[model_of(configuration)]
    found = []
    for obj in objects:
        if not isinstance(obj, Mapping):
            continue
        for kind, path, why in rules:
            value = _lookup(obj, path)
            if obj.get("kind") == kind and value is not None:
                name = (obj.get("metadata") or {}).get("name")
                found.append((f"{kind} {name}", path, value, why))
    return found
