"""What Kueue v0.17 does with a pod and a ResourceFlavor, reproduced for tests.

Written from reading Kueue (sigs.k8s.io/kueue v0.17.0); none of its code is copied:

* which flavors its flavor assigner may give a pod
  (``pkg/scheduler/flavorassigner``, ``flavorSelector`` and the taint check): the
  flavor's ``nodeLabels`` must satisfy the pod's nodeSelector and required node
  affinity, both cut down to the label keys some flavor of the ClusterQueue uses,
  and the flavor's ``nodeTaints`` must be tolerated by the pod's tolerations together
  with the flavor's own ``tolerations``;
* what it does to the pod it admits (``pkg/podset``, ``FromAssignment`` and
  ``Merge``): the flavor's ``nodeLabels`` are merged into the pod's nodeSelector (a
  key the pod has with another value fails the admission) and the flavor's
  tolerations appended, but for those the pod has already.

And the scheduler's rule for a node the admitted pod may run on (nodeSelector,
required node affinity, taints), with the operators the project uses.

``may_admit`` and ``admit`` are held to the real Kueue on the unit tests' inputs
(tests/kueue_cases.py) by tests/integration/test_kueue_model.py.
"""

from __future__ import annotations

import copy


class Conflict(ValueError):
    """Kueue cannot merge the flavor into the pod (``BadPodSetsUpdateError``)."""


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """Kubernetes' rule: some toleration matches the taint's key, value and effect."""
    def match(t: dict) -> bool:
        if t.get("operator", "Equal") == "Exists":
            key_ok = t.get("key") in (None, "", taint["key"])
        else:
            key_ok = t.get("key") == taint["key"] and t.get("value") == taint.get("value")
        return key_ok and t.get("effect") in (None, "", taint["effect"])
    return any(match(t) for t in tolerations)


def _required_terms(spec: dict) -> list[dict]:
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return required.get("nodeSelectorTerms") or []


def _expression_holds(expression: dict, labels: dict[str, str]) -> bool:
    key, operator = expression["key"], expression["operator"]
    if operator == "In":
        return labels.get(key) in expression["values"]
    if operator == "NotIn":
        return labels.get(key) not in expression["values"]
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise NotImplementedError(operator)


def selects(spec: dict, labels: dict[str, str], keys: set[str] | None = None) -> bool:
    """The pod ``spec``'s nodeSelector and required node affinity (terms ORed, the
    expressions of a term ANDed) hold for ``labels``; with ``keys``, only what
    speaks of those keys counts (Kueue's view of a flavor)."""
    def counts(key: str) -> bool:
        return keys is None or key in keys

    selector = spec.get("nodeSelector") or {}
    if any(counts(k) and labels.get(k) != v for k, v in selector.items()):
        return False
    terms = [[e for e in t.get("matchExpressions") or [] if counts(e["key"])]
             for t in _required_terms(spec)]
    return not terms or any(all(_expression_holds(e, labels) for e in t) for t in terms)


def may_admit(pod: dict, flavor: dict, flavor_keys: set[str]) -> bool:
    """Kueue's flavor assigner may give ``pod`` the ResourceFlavor ``flavor``;
    ``flavor_keys`` are the ``nodeLabels`` keys of the ClusterQueue's flavors."""
    spec, flavor_spec = pod["spec"], flavor["spec"]
    tolerations = [*(spec.get("tolerations") or []), *(flavor_spec.get("tolerations") or [])]
    return (selects(spec, flavor_spec.get("nodeLabels") or {}, flavor_keys)
            and all(tolerates(tolerations, t) for t in flavor_spec.get("nodeTaints") or []))


def admit(pod: dict, flavor: dict) -> dict:
    """``pod`` as Kueue leaves it once admitted to ``flavor`` (a new dict)."""
    admitted = copy.deepcopy(pod)
    spec, flavor_spec = admitted["spec"], flavor["spec"]
    selector = dict(spec.get("nodeSelector") or {})
    for key, value in (flavor_spec.get("nodeLabels") or {}).items():
        if selector.get(key, value) != value:
            raise Conflict(f"nodeSelector {key}: the pod has {selector[key]!r}, "
                           f"flavor {flavor['metadata']['name']!r} {value!r}")
        selector[key] = value
    tolerations = list(spec.get("tolerations") or [])
    tolerations += [t for t in flavor_spec.get("tolerations") or [] if t not in tolerations]
    spec["nodeSelector"], spec["tolerations"] = selector, tolerations
    return admitted


def node_takes(spec: dict, node: dict) -> bool:
    """The scheduler's rule for ``node`` (a Node object) and the pod ``spec``: its
    selector and required affinity hold for the node's labels, and every NoSchedule
    or NoExecute taint of the node is tolerated."""
    taints = [t for t in (node.get("spec") or {}).get("taints") or []
              if t["effect"] in ("NoSchedule", "NoExecute")]
    return (selects(spec, node["metadata"].get("labels") or {})
            and all(tolerates(spec.get("tolerations") or [], t) for t in taints))
