"""Golden tests of the cluster-side builders where the exact output is the contract:
the ClusterQueue policy and quotas, the device-plugin configs, the labels of a real
node. (That flavors, nodes and pods fit together is tested in test_fit.py.)"""

from __future__ import annotations

import yaml

from jupyterhub_gpu.builders import deviceplugin, kueue, nodes

SPOT_TAINTS = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
               {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot",
                "effect": "NoSchedule"}]
#: every GPU pool advertises nvidia.com/gpu: whole GPUs, time-sliced shares, MIG slices
COVERED = ["cpu", "memory", "nvidia.com/gpu"]


def _quota(cpu, memory, gpu, limit=None):
    values = dict(zip(COVERED, (cpu, memory, gpu)))
    out = []
    for name, value in values.items():
        entry = {"name": name, "nominalQuota": value}
        if limit is not None:
            entry["borrowingLimit"] = value
        out.append(entry)
    return out


def test_cluster_queue(platform):
    team = next(t for t in platform.teams if t.name == "experimentation")
    assert kueue.cluster_queue(platform, team) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "experimentation"},
        "spec": {
            "cohortName": "jupyterhub-gpu",
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": "jhub-experimentation"}},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
                           "borrowWithinCohort": {"policy": "LowerPriority",
                                                  "maxPriorityThreshold": 100}},
            # a fallback profile's workload tries its next pool before borrowing or
            # preempting in this one (test_fallback.py)
            "flavorFungibility": {"whenCanBorrow": "TryNextFlavor",
                                  "whenCanPreempt": "TryNextFlavor"},
            "resourceGroups": [{
                "coveredResources": COVERED,
                "flavors": [
                    # one node's worth, less AKS's reservations and the daemonsets
                    {"name": "t4dev", "resources": _quota("7320m", "53458Mi", "4")},
                    {"name": "a100mig", "resources": _quota("0", "0", "0")},
                    {"name": "a100spot", "resources": [
                        {"name": "cpu", "nominalQuota": "46320m", "borrowingLimit": "23160m"},
                        {"name": "memory", "nominalQuota": "442788Mi",
                         "borrowingLimit": "221394Mi"},
                        {"name": "nvidia.com/gpu", "nominalQuota": "2", "borrowingLimit": "1"}]},
                    # the on-demand A100s: the team has none, its profiles do not use them
                    {"name": "a100", "resources": _quota("0", "0", "0")},
                    # the CPU pool's quota is in nodes: two nodes' cpu and memory, no GPU
                    {"name": "cpu", "resources": _quota("14640m", "57764Mi", "0")},
                ],
            }],
        },
    }


def test_quota_shares_of_a_node_round_down(platform):
    team = next(t for t in platform.teams if t.name == "data-science")
    flavors = kueue.cluster_queue(platform, team)["spec"]["resourceGroups"][0]["flavors"]
    t4 = {r["name"]: r["nominalQuota"] for r in flavors[0]["resources"]}
    # 8 shares of 4-per-node T4 nodes = two nodes' worth of what each leaves for
    # notebooks: 8 vCPU - 180m - 500m, 56Gi - 2250Mi - 100Mi - 1536Mi
    assert t4 == {"cpu": "14640m", "memory": "106916Mi", "nvidia.com/gpu": "8"}


def test_kueue_objects_order(platform):
    kinds = [o["kind"] for o in kueue.kueue_objects(platform)]
    assert kinds == ["WorkloadPriorityClass"] * 3 + ["ResourceFlavor"] * 5 + \
        ["ClusterQueue"] * 3 + ["LocalQueue"] * 3


def test_a_cpu_pool_flavor_selects_its_nodes_and_tolerates_only_the_user_taint(platform):
    flavor = kueue.resource_flavor(platform.pool("cpu"))
    assert (flavor["kind"], flavor["metadata"]) == ("ResourceFlavor", {"name": "cpu"})
    assert flavor["spec"]["nodeLabels"] == {"kubernetes.azure.com/agentpool": "cpu"}
    assert flavor["spec"]["nodeTaints"] == [
        {"key": "hub.jupyter.org/dedicated", "value": "user", "effect": "NoSchedule"}]
    assert flavor["spec"]["tolerations"] == [
        {"key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user",
         "effect": "NoSchedule"}]


def test_device_plugin_configs(platform):
    cm = deviceplugin.config_map(platform)
    assert cm["metadata"] == {"name": "jupyterhub-gpu-device-plugin", "namespace": "gpu-operator"}
    assert {k: yaml.safe_load(v) for k, v in cm["data"].items()} == {
        "default": {"version": "v1", "flags": {"migStrategy": "none"}},
        "mig-single": {"version": "v1", "flags": {"migStrategy": "single"}},
        "timeslicing-4": {"version": "v1", "flags": {"migStrategy": "none"}, "sharing": {
            "timeSlicing": {"renameByDefault": False, "failRequestsGreaterThanOne": True,
                            "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}},
    }


def test_mps_config(example_spec):
    from jupyterhub_gpu.spec.parse import parse_platform

    example_spec["pools"][0]["sharing"] = {"mode": "mps", "replicas": 2}
    pool = parse_platform(example_spec).pool("t4dev")
    assert deviceplugin.plugin_config(pool) == {
        "version": "v1", "flags": {"migStrategy": "none"},
        "sharing": {"mps": {"renameByDefault": False,
                            "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
    labels = deviceplugin.node_labels(pool)
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.replicas"]) == (
        "Tesla-T4-SHARED", "2")
    assert pool.resource_name == "nvidia.com/gpu"


def test_fake_node_of_a_mig_pool(platform):
    """The single MIG strategy: the node's two 3g.40gb instances are its nvidia.com/gpu,
    and GPU feature discovery labels them, not the A100 (NVIDIA/k8s-device-plugin,
    internal/lm/mig-strategy.go, newMigStrategySingleLabeler; resource.go,
    NewMIGResourceLabeler: product <model>-MIG-<profile>, the instances' count, one
    instance's memory; mig.strategy single)."""
    name = "aks-a100mig-00000000-vmss000000"
    capacity = {"cpu": "24", "memory": "220Gi", "pods": "110", "nvidia.com/gpu": "2"}
    # less kube-reserved (340m; 20Mi * 110 + 50Mi) and the 100Mi eviction threshold
    allocatable = {**capacity, "cpu": "23660m", "memory": "222930Mi"}
    assert nodes.fake_node(platform.pool("a100mig"), 0) == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.azure.com/agentpool": "a100mig",
                "kubernetes.azure.com/accelerator": "nvidia",
                "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe-MIG-3g.40gb",
                "nvidia.com/gpu.count": "2",
                "nvidia.com/gpu.replicas": "1",
                "nvidia.com/gpu.memory": "40960",
                "nvidia.com/gpu.sharing-strategy": "none",
                "nvidia.com/device-plugin.config": "mig-single",
                "nvidia.com/mig.config": "all-3g.40gb",
                "nvidia.com/mig.strategy": "single",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present",
                             "effect": "NoSchedule"}]},
        "status": {"capacity": capacity, "allocatable": allocatable},
    }


def test_spot_time_sliced_node_labels(platform):
    labels = deviceplugin.node_labels(platform.pool("t4dev"))
    # GPU feature discovery: a shared, not renamed GPU's product ends -SHARED and its
    # replicas are the config's (NVIDIA/k8s-device-plugin internal/lm/resource.go,
    # getProductName, baseLabeler)
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.replicas"]) == ("1", "4")
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/mig.config"] == "all-disabled"
    spot = deviceplugin.node_labels(platform.pool("a100spot"))
    assert spot["kubernetes.azure.com/scalesetpriority"] == "spot"
    assert nodes.fake_node(platform.pool("a100spot"), 1)["spec"]["taints"] == SPOT_TAINTS


def test_each_fake_node_is_a_fresh_object(platform):
    for pool in platform.pools:
        node = nodes.fake_node(pool, 0)
        node["metadata"]["labels"].clear()
        node["status"]["capacity"].clear()
        again = nodes.fake_node(pool, 0)
        assert again["metadata"]["labels"] and again["status"]["capacity"]
