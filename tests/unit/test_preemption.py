"""One preemption model: the Kueue objects the builders make set only fields that Kueue
acts on under the model its shipped Configuration selects (classical preemption)."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.builders import preemption
from jupyterhub_gpu.builders.kueue import kueue_objects
from jupyterhub_gpu.bundle.kueueconfig import kueue_configuration
from jupyterhub_gpu.spec.parse import load_platform, parse_platform

SPECS = ["config/platform.yaml", "tests/integration/platform.yaml"]
CLASSICAL_FIELDS = {"withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"}


@pytest.mark.parametrize("spec", SPECS)
def test_generated_objects_set_no_field_kueue_ignores(repo_root, spec):
    platform = load_platform(repo_root / spec)
    config = kueue_configuration(platform)
    assert preemption.model_of(config) == preemption.MODEL == preemption.CLASSICAL
    objects = kueue_objects(platform)
    assert preemption.ignored_fields(config, objects) == []
    queues = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert queues and all(set(q["spec"]["preemption"]) == CLASSICAL_FIELDS for q in queues)


def test_ignored_fields_depend_on_the_model():
    queue = {"kind": "ClusterQueue", "metadata": {"name": "a"}, "spec": {
        "preemption": {"reclaimWithinCohort": "Any",
                       "borrowWithinCohort": {"policy": "LowerPriority"}},
        "fairSharing": {"weight": "2"}}}
    cohort = {"kind": "Cohort", "metadata": {"name": "c"}, "spec": {"fairSharing": {"weight": "1"}}}

    def found(config):
        return [(obj, path, value) for obj, path, value, _ in
                preemption.ignored_fields(config, [queue, cohort, "not an object"])]

    assert found({}) == [("ClusterQueue a", "spec.fairSharing", {"weight": "2"}),
                         ("Cohort c", "spec.fairSharing", {"weight": "1"})]
    # an empty fairSharing section turns fair sharing on (Kueue defaults its strategies)
    assert found({"fairSharing": {}}) == [
        ("ClusterQueue a", "spec.preemption.borrowWithinCohort", {"policy": "LowerPriority"})]
    assert found({"fairSharing": None}) == found({})


def test_borrow_within_cohort_reaches_the_highest_preemptible_priority(example_spec):
    example_spec["priorities"].append({"name": "scavenger", "value": 50, "preemptible": True})
    example_spec["priorities"][1]["preemptible"] = True  # batch, 500
    policy = preemption.cluster_queue_preemption(parse_platform(example_spec))
    assert policy == {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
                      "borrowWithinCohort": {"policy": "LowerPriority",
                                             "maxPriorityThreshold": 500}}
    for priority in example_spec["priorities"]:
        priority["preemptible"] = False
    policy = preemption.cluster_queue_preemption(parse_platform(example_spec))
    assert policy == {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
