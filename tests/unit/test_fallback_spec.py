"""Fallback profiles in the spec: ``pools`` parsed and validated (every problem named
by profile and field, through the parser's error list), the one order every
ClusterQueue lists its flavors in, and what the spawn form shows."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.builders import kueue
from jupyterhub_gpu.spec.fallback import flavor_order, order_conflicts
from jupyterhub_gpu.hub.form import profile_card, render_form
from jupyterhub_gpu.spec.parse import SpecError, parse_platform

TRAINING = "a100-training"  # the example's fallback profile: pools [a100spot, a100]


def _profile(spec: dict, slug: str = TRAINING) -> dict:
    return next(p for p in spec["profiles"] if p["slug"] == slug)


def _errors(spec: dict) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_platform(spec)
    return info.value.errors


def _exclusive_a100(name: str) -> dict:
    return {"name": name, "vmSize": "Standard_NC24ads_A100_v4", "gpu": "A100-80GB",
            "sharing": {"mode": "exclusive"}, "minNodes": 0, "maxNodes": 1,
            "pricePerNodeHour": 3.673}


def _copy_of_training(spec: dict, slug: str, pools: list[str]) -> dict:
    return {**_profile(spec), "slug": slug, "pools": pools}


def test_the_example_profile_falls_back_from_spot_to_on_demand(platform):
    profile = platform.profile(TRAINING)
    assert (profile.pool, profile.pool_names, profile.fallback) == (
        "a100spot", ("a100spot", "a100"), True)
    assert [p.spot for p in platform.pools_of(profile)] == [True, False]


def test_pools_of_one_is_a_single_pool_profile(example_spec):
    _profile(example_spec)["pools"] = ["a100"]
    profile = parse_platform(example_spec).profile(TRAINING)
    assert (profile.pool, profile.pool_names, profile.fallback) == ("a100", ("a100",), False)


@pytest.mark.parametrize("change, error", [
    ({"pool": "a100"}, "pools: give either pool (one pool) or pools (several, in order of "
                       "preference), not both"),
    ({"pools": []}, "pools: must name at least one pool, the preferred first"),
    ({"pools": ["a100", "a100"]}, "pools: names pool(s) 'a100' more than once"),
    ({"pools": "a100"}, "pools: must be a list of names, got 'a100'"),
    ({"pools": ["a100spot", "h100"]},
     "pools: unknown pool 'h100'; valid: a100, a100mig, a100spot, cpu, t4dev"),
])
def test_bad_pools_are_named(example_spec, change, error):
    _profile(example_spec).update(change)
    assert _errors(example_spec) == [f"profile {TRAINING!r}: {error}"]


def test_a_profile_needs_a_pool_or_pools(example_spec):
    del _profile(example_spec)["pools"]
    assert _errors(example_spec) == [
        f"profile {TRAINING!r}: pool: is required (or pools: several, in order of preference)"]


def test_a_fallback_pool_of_another_gpu_resource_kind_names_both_pools(example_spec):
    """The issue's bad input: a whole A100 falling back to a MIG slice."""
    _profile(example_spec)["pools"] = ["a100spot", "a100mig"]
    (error,) = _errors(example_spec)
    assert error.startswith(f"profile {TRAINING!r}: pools: pool 'a100mig' offers one MIG "
                            f"3g.40gb slice per nvidia.com/gpu (mig) but pool 'a100spot' "
                            f"offers one GPU per nvidia.com/gpu (exclusive)")


def test_the_same_resource_in_another_sharing_mode_is_refused(example_spec):
    """Time-slicing and MPS both advertise nvidia.com/gpu, but are not alike."""
    example_spec["pools"].append({**example_spec["pools"][0], "name": "t4mps",
                                  "sharing": {"mode": "mps", "replicas": 4}})
    _profile(example_spec, "t4-shared").pop("pool")
    _profile(example_spec, "t4-shared")["pools"] = ["t4dev", "t4mps"]
    (error,) = _errors(example_spec)
    assert "pool 't4mps' offers one MPS share per nvidia.com/gpu (mps) but pool 't4dev' " \
           "offers one time-sliced share per nvidia.com/gpu (timeslicing)" in error


def test_mig_slices_of_another_profile_are_refused(example_spec):
    """Under the single MIG strategy every slice is nvidia.com/gpu: a 1g.20gb slice is
    still not a 3g.40gb one."""
    example_spec["pools"].append({**example_spec["pools"][1], "name": "a100mig1g",
                                  "sharing": {"mode": "mig", "migProfile": "1g.20gb"}})
    _profile(example_spec, "a100-mig-3g").pop("pool")
    _profile(example_spec, "a100-mig-3g")["pools"] = ["a100mig", "a100mig1g"]
    assert any("pool 'a100mig1g' offers one MIG 1g.20gb slice per nvidia.com/gpu (mig) "
               "but pool 'a100mig' offers one MIG 3g.40gb slice per nvidia.com/gpu (mig)"
               in error for error in _errors(example_spec))


@pytest.mark.parametrize("pools", [["a100spot", "cpu"], ["cpu", "a100spot"], ["cpu", "cpu2"]])
def test_a_cpu_pool_in_a_fallback_is_refused(example_spec, pools):
    """Fallback is between GPU pools of one kind: a CPU pool beside a GPU one, or a
    CPU-only profile over two CPU pools, is refused naming the CPU pools, and nothing
    else is said about the profile."""
    example_spec["pools"].append({**next(p for p in example_spec["pools"]
                                         if p["name"] == "cpu"), "name": "cpu2"})
    profile = _profile(example_spec, "cpu")
    profile.pop("pool")
    profile["pools"] = pools
    cpu_pools = ", ".join(repr(p) for p in pools if p.startswith("cpu"))
    assert _errors(example_spec) == [
        f"profile 'cpu': pools: {cpu_pools} {'has' if ',' not in cpu_pools else 'have'} no "
        f"GPU (gpu: none); a fallback profile moves between GPU pools of one kind, and a "
        f"CPU-only profile runs on one pool: use pool: <name>"]


def test_every_pool_of_a_fallback_profile_is_checked(example_spec):
    """The profile's cpu must fit a node of each pool, and its checkpoint grace each
    spot pool's eviction notice; the missing checkpoint storage is said once."""
    del example_spec["jobProfiles"]  # notebook profiles only (test_job_profiles.py)
    example_spec["pools"].append({**_exclusive_a100("a100small"),
                                  "vmSize": "Standard_NC24ads_A100_v4", "cpusPerNode": 16})
    _profile(example_spec)["pools"] = ["a100spot", "a100small"]
    del example_spec["checkpointStorage"]
    errors = _errors(example_spec)
    assert [e.split(": ")[0] for e in errors if ": cpu: " in e] == [
        f"profile {TRAINING!r} on pool 'a100small'"]
    assert sum("no checkpointStorage" in e for e in errors) == 2  # a100-training, a100-spot


def test_two_profiles_may_not_prefer_two_pools_the_other_way_round(example_spec):
    del example_spec["jobProfiles"]  # a job profile's order: test_job_profiles.py
    example_spec["profiles"].append(_copy_of_training(example_spec, "od-first",
                                                      ["a100", "a100spot"]))
    assert _errors(example_spec) == [
        "profile 'od-first': pools: prefers pool 'a100' to 'a100spot', but profile "
        "'a100-training' prefers 'a100spot' to 'a100'; every team's ClusterQueue tries its "
        "pools in one order, so two profiles cannot prefer them the other way round: give "
        "both the same order"]


def test_orders_that_form_a_cycle_are_refused_naming_the_profiles(example_spec):
    del example_spec["jobProfiles"]
    example_spec["pools"].append(_exclusive_a100("a100b"))
    _profile(example_spec)["pools"] = ["a100spot", "a100"]
    example_spec["profiles"] += [_copy_of_training(example_spec, "second", ["a100", "a100b"]),
                                 _copy_of_training(example_spec, "third", ["a100b", "a100spot"])]
    assert _errors(example_spec) == [
        "profiles 'a100-training', 'second', 'third': pools: their orders of preference "
        "form a cycle, so no ClusterQueue order suits them all"]


def test_agreeing_orders_are_kept_and_the_rest_stays_in_spec_order(platform):
    profiles = platform.profiles
    assert flavor_order(["cpu", "a100", "t4dev", "a100spot"], profiles) == [
        "cpu", "t4dev", "a100spot", "a100"]
    assert order_conflicts(profiles, [p.name for p in platform.pools]) == []


def test_every_cluster_queue_tries_a_fallback_profiles_pools_in_its_order(example_spec):
    """Listed after its fallback in the spec, the preferred pool still comes first in
    each team's ClusterQueue, and every queue tries the next pool before borrowing or
    preempting (Kueue's flavorFungibility)."""
    pools = example_spec["pools"]
    on_demand = next(p for p in pools if p["name"] == "a100")
    pools.remove(on_demand)
    pools.insert(0, on_demand)
    platform = parse_platform(example_spec)
    for team in platform.teams:
        spec = kueue.cluster_queue(platform, team)["spec"]
        flavors = [f["name"] for f in spec["resourceGroups"][0]["flavors"]]
        assert flavors.index("a100spot") < flavors.index("a100"), team.name
        assert sorted(flavors) == sorted(p.name for p in platform.pools)
        assert spec["flavorFungibility"] == {"whenCanBorrow": "TryNextFlavor",
                                             "whenCanPreempt": "TryNextFlavor"}


def test_the_form_shows_the_price_range_and_the_pools_in_order(platform):
    card = profile_card(platform, platform.profile(TRAINING))
    # one A100 per node: the spot node's price, then the on-demand node's
    assert card.price_per_hour == "$1.10–$3.67"
    assert card.pools == "a100spot ($1.10), then a100 ($3.67)"
    assert card.preemptible and card.gpu_model == "A100-80GB"
    single = profile_card(platform, platform.profile("a100-spot"))
    assert (single.price_per_hour, single.pools) == ("$1.10", "")
    page = render_form(platform, frozenset({"ml-eng"}), TRAINING)
    assert ("Runs on the first of these pools with room: a100spot ($1.10), then a100 "
            "($3.67)") in page
    assert "about $1.10–$3.67 per hour" in page
    assert page.count("gpu-pools") == 1  # only the fallback profile's card


def h100_fallback(spec: dict) -> dict:
    """The issue's other example: an A100 MIG 3g slice, else an H100 MIG 3g slice (the
    same resource, nvidia.com/mig-3g.40gb, on another GPU)."""
    spec["pools"].append({"name": "h100mig", "vmSize": "Standard_ND96isr_H100_v5",
                          "gpu": "H100-80GB", "sharing": {"mode": "mig", "migProfile": "3g.40gb"},
                          "minNodes": 0, "maxNodes": 1, "pricePerNodeHour": 98.32})
    profile = _profile(spec, "a100-mig-3g")
    profile.pop("pool")
    profile.update(pools=["a100mig", "h100mig"], cpu=4, memory="64Gi")  # fits both nodes
    return spec


def test_a_fallback_between_gpu_models_shows_both(example_spec):
    platform = parse_platform(h100_fallback(example_spec))
    card = profile_card(platform, platform.profile("a100-mig-3g"))
    assert card.gpu_model == "A100-80GB or H100-80GB"
    assert card.gpu_memory == "40 GB"  # the same slice on both
    # half an A100 node, a sixteenth of an 8-GPU H100 node
    assert card.price_per_hour == "$1.84–$6.14"
