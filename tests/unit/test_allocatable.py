"""A profile must fit the node it shares: AKS's reservations, the daemonsets, the
validate errors, the Kueue quotas and the dev cluster's nodes all count the same."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.spec import allocatable
from jupyterhub_gpu.builders import nodes
from jupyterhub_gpu.spec.parse import SpecError, parse_platform
from jupyterhub_gpu.spec.validate import check_warnings

Mi, Gi = 2**20, 2**30


# The table of AKS's "Node resource reservations" page: cores -> kube-reserved CPU.
@pytest.mark.parametrize("cores,millis", [(1, 60), (2, 100), (4, 140), (8, 180), (16, 260),
                                          (32, 420), (64, 740)])
def test_kube_reserved_cpu_is_aks_table(cores, millis):
    assert allocatable.kube_reserved_cpu_millis(cores) == millis


def test_kube_reserved_cpu_between_and_beyond_the_table():
    assert allocatable.kube_reserved_cpu_millis(3) == 120
    assert allocatable.kube_reserved_cpu_millis(24) == 340
    assert allocatable.kube_reserved_cpu_millis(96) == 1060


def test_kube_reserved_memory_is_the_lesser_of_per_pod_and_a_quarter():
    # the page's examples: 8 GB with 30 pods -> 20*30+50 = 650; 4 GB with 70 pods -> 25%
    assert allocatable.kube_reserved_memory(8 * Gi, max_pods=30) == 650 * Mi
    assert allocatable.kube_reserved_memory(4 * Gi, max_pods=70) == Gi
    assert allocatable.kube_reserved_memory(56 * Gi) == 2250 * Mi  # 110 pods


def test_t4_node_budget(platform):
    node = allocatable.node_resources(platform.pool("t4dev"))
    assert (node.allocatable_cpu_millis, node.allocatable_memory) == (7820, 56 * Gi - 2350 * Mi)
    assert (node.pods_cpu_millis, node.pods_memory) == (7320, 56 * Gi - 3886 * Mi)


def test_the_fourth_share_at_two_cpus_is_refused(example_spec):
    """The issue's case: 4 time-sliced shares x cpu 2 = all 8 vCPUs of the T4 node."""
    example_spec["profiles"][0]["cpu"] = 2
    with pytest.raises(SpecError) as info:
        parse_platform(example_spec)
    (error,) = info.value.errors
    assert error.startswith("profile 't4-shared' on pool 't4dev': cpu: 4 shares per node × "
                            "cpu 2 = 8 > 7.32 allocatable vCPU on Standard_NC8as_T4_v3")


def test_the_largest_fitting_request_is_accepted(example_spec):
    example_spec["profiles"][0].update(cpu="1830m", memory="13364Mi")
    parse_platform(example_spec)
    example_spec["profiles"][0].update(cpu="1831m", memory="13365Mi")
    with pytest.raises(SpecError) as info:
        parse_platform(example_spec)
    assert [e.split(": ")[1] for e in info.value.errors] == ["cpu", "memory"]


def test_multi_gpu_servers_on_a_multi_gpu_node(example_spec):
    example_spec["pools"].append({"name": "a100x4", "vmSize": "Standard_NC96ads_A100_v4",
                                  "gpu": "A100-80GB", "sharing": {"mode": "exclusive"}})
    example_spec["profiles"][2].pop("pools")  # a100-training, on a100x4 alone
    example_spec["profiles"][2].update(pool="a100x4", gpus=2, cpu=48, memory="400Gi")
    with pytest.raises(SpecError) as info:
        parse_platform(example_spec)
    assert info.value.errors == [
        "profile 'a100-training' on pool 'a100x4': cpu: (4 GPUs per node / 2 per server) × "
        "cpu 48 = 96 > 94.44 allocatable vCPU on Standard_NC96ads_A100_v4 (96 vCPU − 1060m "
        "kube-reserved − 500m daemonsetOverhead); use cpu: 47220m or less"]


def test_daemonset_overhead_may_be_zero_and_counts(example_spec):
    example_spec["profiles"][0].update(cpu="1955m")  # (8000 - 180) / 4
    with pytest.raises(SpecError):
        parse_platform(example_spec)  # the default overhead leaves 1830m a share
    example_spec["pools"][0]["daemonsetOverhead"] = {"cpu": 0, "memory": "0"}
    pool = parse_platform(example_spec).pool("t4dev")
    assert (pool.daemonset_overhead.cpu, pool.daemonset_overhead.memory_bytes) == (0, 0)


def test_every_error_at_once(example_spec):
    example_spec["profiles"][0]["cpu"] = 2
    example_spec["profiles"][1]["memory"] = "110Gi"  # 2 slices per A100 node of 220Gi
    example_spec["profiles"][2]["cpu"] = 24  # a fallback profile: on each of its pools
    with pytest.raises(SpecError) as info:
        parse_platform(example_spec)
    assert [e.split(": ")[:2] for e in info.value.errors] == [
        ["profile 't4-shared' on pool 't4dev'", "cpu"],
        ["profile 'a100-mig-3g' on pool 'a100mig'", "memory"],
        ["profile 'a100-training' on pool 'a100spot'", "cpu"],
        ["profile 'a100-training' on pool 'a100'", "cpu"]]


def test_fake_node_reports_aks_allocatable(platform):
    node = nodes.fake_node(platform.pool("t4dev"), 0)
    assert node["status"]["capacity"] == {"cpu": "8", "memory": "56Gi", "pods": "110",
                                          "nvidia.com/gpu": "4"}
    assert node["status"]["allocatable"] == {"cpu": "7820m", "memory": "54994Mi",
                                             "pods": "110", "nvidia.com/gpu": "4"}


def test_overhead_daemonset_requests_the_pools_overhead(platform):
    ds = nodes.overhead_daemonset(platform.pool("a100spot"))
    pod = ds["spec"]["template"]["spec"]
    assert ds["metadata"]["namespace"] == "kube-system"
    assert pod["nodeSelector"] == {"kubernetes.azure.com/agentpool": "a100spot"}
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "500m", "memory": "1536Mi"}}
    assert ds["spec"]["selector"]["matchLabels"].items() <= \
        ds["spec"]["template"]["metadata"]["labels"].items()


def test_example_spec_has_no_warnings(platform):
    assert check_warnings(platform) == []


def test_quota_on_a_pool_no_profile_of_the_team_may_use_is_warned(example_spec):
    # a100-spot and a100-training allow ml-eng and experimentation, not data-science
    example_spec["teams"][0]["quota"]["a100spot"] = 2
    example_spec["teams"][1]["quota"]["a100spot"] = 0  # zero quota is no quota
    example_spec["pools"].append({"name": "idle", "vmSize": "Standard_NC4as_T4_v3",
                                  "gpu": "T4", "sharing": {"mode": "exclusive"}})
    example_spec["teams"][2]["quota"]["idle"] = 1
    assert check_warnings(parse_platform(example_spec)) == [
        "team 'data-science': quota: 2 GPUs of pool 'a100spot', but none of its profiles "
        "(a100-training, a100-spot, a100-train, a100-ddp-2) allows the team's groups "
        "(data-science); the team's "
        "users cannot use this quota, it can only be lent to the cohort",
        "team 'experimentation': quota: 1 GPU of pool 'idle', but no profile uses that pool; "
        "the team's users cannot use this quota, it can only be lent to the cohort"]


def test_a_profile_without_allowed_groups_serves_every_team(example_spec):
    example_spec["teams"][0]["quota"]["a100spot"] = 2
    del example_spec["profiles"][3]["allowedGroups"]
    assert check_warnings(parse_platform(example_spec)) == []
