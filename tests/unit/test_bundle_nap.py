"""AKS autoscaling from the spec, in both forms: a pool of the cluster autoscaler is an
AKS node pool (``var.gpu_pools``: min/max, node-template tags) under one autoscaler
profile; a pool of Node Auto Provisioning is a Karpenter NodePool and AKSNodeClass
(valid for the CRDs AKS installs), selected by ``karpenter.sh/nodepool``. ``validate``
refuses NAP where its Karpenter could never start a fitting node, and ``check-bundle``
covers the NAP objects."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from jupyterhub_gpu.builders import karpenter, kueue, nodes
from jupyterhub_gpu.builders.deviceplugin import pool_labels
from jupyterhub_gpu.bundle.autoscaler import TEMPLATE_PREFIX
from jupyterhub_gpu.bundle.nap import nap_objects
from jupyterhub_gpu.bundle.terraform import tfvars
from jupyterhub_gpu.contract import (AGENTPOOL_LABEL, CAPACITY_TYPE_LABEL,
                                     INSTANCE_TYPE_LABEL, NODEPOOL_LABEL)
from jupyterhub_gpu.spec.parse import SpecError, parse_platform
from jupyterhub_gpu.hub.render import render_pod
from jupyterhub_gpu.spec.validate import check_warnings

from ..kueue_cases import NAP, nap_spec
from .test_schemas import _crd_schema

CLI = [sys.executable, "-m", "jupyterhub_gpu.cli"]


def _by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_classic_pools_are_node_pools_with_min_max_tags_and_the_profile(platform):
    variables = tfvars(platform)
    assert set(variables["gpu_pools"]) == {p.name for p in platform.pools}
    for pool in platform.pools:
        entry = variables["gpu_pools"][pool.name]
        assert (entry["min_count"], entry["max_count"]) == (pool.min_nodes, pool.max_nodes)
        resources = {k.removeprefix(f"{TEMPLATE_PREFIX}resources_"): v
                     for k, v in entry["autoscaler_tags"].items()
                     if k.startswith(f"{TEMPLATE_PREFIX}resources_")}
        assert resources == {r.replace("/", "_"): n
                             for r, n in pool.gpu_resources(pool.units_per_node).items()}
    assert variables["node_auto_provisioning"] is False
    assert variables["cluster_autoscaler"] == {"scale_down_unneeded": "10m",
                                               "max_node_provisioning_time": "16m"}
    assert nap_objects(platform) == []


def test_min_count_comes_from_min_nodes(example_spec):
    example_spec["pools"][0]["minNodes"] = 2
    pool = tfvars(parse_platform(example_spec))["gpu_pools"]["t4dev"]
    assert (pool["min_count"], pool["max_count"]) == (2, 5)


@pytest.mark.parametrize("after, unneeded", [
    ("10m", "10m"), ("0s", "1m"), ("90s", "2m"), ("61s", "2m"), ("1h", "60m")])
def test_scale_down_unneeded_is_the_shortest_consolidate_after_in_whole_minutes(
        example_spec, after, unneeded):
    for pool in example_spec["pools"]:
        pool["consolidateAfter"] = "2h"
    example_spec["pools"][1]["consolidateAfter"] = after
    nap_spec(example_spec, "a100spot")["pools"][2]["consolidateAfter"] = "0s"  # not its own
    variables = tfvars(parse_platform(example_spec))
    assert variables["cluster_autoscaler"]["scale_down_unneeded"] == unneeded


def test_a_nap_pool_is_a_node_pool_and_node_class_not_an_aks_node_pool(example_spec):
    platform = parse_platform(nap_spec(example_spec, "a100spot"))
    pool = platform.pool("a100spot")
    variables = tfvars(platform)
    # no node pool, no tags
    assert set(variables["gpu_pools"]) == {"t4dev", "a100mig", "a100", "cpu"}
    assert variables["node_auto_provisioning"] is True
    objects = nap_objects(platform)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("AKSNodeClass", "a100spot"), ("NodePool", "a100spot")]
    node_class, node_pool = objects
    assert node_class["spec"] == {"imageFamily": "Ubuntu", "osDiskSizeGB": 256,
                                  "maxPods": 110, "gpu": {"mode": "None"}}
    template = node_pool["spec"]["template"]
    assert template["metadata"]["labels"] == pool_labels(pool)  # no kubernetes.azure.com/*
    assert template["spec"]["nodeClassRef"] == {"group": "karpenter.azure.com",
                                                "kind": "AKSNodeClass", "name": "a100spot"}
    assert template["spec"]["requirements"] == [
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": ["Standard_NC24ads_A100_v4"]},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["spot"]}]
    assert template["spec"]["taints"] == [t.as_dict() for t in pool.taints]
    assert template["spec"]["expireAfter"] == "Never"
    assert node_pool["spec"]["limits"] == {"nodes": "5"}
    disruption = node_pool["spec"]["disruption"]
    assert (disruption["consolidationPolicy"], disruption["consolidateAfter"]) == (
        "WhenEmpty", "10m")
    # The dev cluster's NodePool for the pool scales it the same way.
    dev = karpenter.node_pool(pool)
    assert dev["spec"]["disruption"] == disruption and dev["spec"]["limits"] == {"nodes": "5"}


def test_on_demand_nap_pool(example_spec):
    example_spec["pools"][2]["spot"] = False
    for profile in example_spec["profiles"] + example_spec["jobProfiles"]:
        profile.pop("checkpoint", None)
    node_pool = _by_kind(nap_objects(parse_platform(nap_spec(example_spec, "a100spot"))),
                         "NodePool")["a100spot"]
    assert node_pool["spec"]["template"]["spec"]["requirements"][1]["values"] == ["on-demand"]
    assert [t["key"] for t in node_pool["spec"]["template"]["spec"]["taints"]] == [
        "nvidia.com/gpu"]


def test_nap_objects_match_the_crds_aks_installs(example_spec, azure_karpenter_crds):
    platform = parse_platform(nap_spec(example_spec, "t4dev", "a100spot"))
    versions = {"NodePool": "v1", "AKSNodeClass": "v1beta1"}
    objects = nap_objects(platform)
    assert len(objects) == 4
    for obj in objects:
        group, version = obj["apiVersion"].split("/")
        crd = azure_karpenter_crds[obj["kind"]]
        assert (crd["spec"]["group"], version) == (group, versions[obj["kind"]])
        stored = next(v for v in crd["spec"]["versions"] if v["storage"])
        assert stored["name"] == version
        jsonschema.validate(obj, _crd_schema(azure_karpenter_crds, obj["kind"], version))


def test_the_template_labels_pass_the_label_rules_of_aks_node_pool_crd(
        example_spec, azure_karpenter_crds):
    """AKS's NodePool CRD allows a template only the kubernetes.azure.com labels it lists,
    agentpool not among them (a CEL rule, which jsonschema does not run;
    tests/integration/test_nap_objects.py has the API server run it)."""
    crd = next(v for v in azure_karpenter_crds["NodePool"]["spec"]["versions"]
               if v["name"] == "v1")
    labels = crd["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["template"][
        "properties"]["metadata"]["properties"]["labels"]
    rule = next(r["rule"] for r in labels["x-kubernetes-validations"]
                if r["message"] == 'label domain "kubernetes.azure.com" is restricted')
    allowed = set(re.findall(r'"(kubernetes\.azure\.com/[^"]+)"', rule))
    assert AGENTPOOL_LABEL not in allowed and "kubernetes.azure.com/scalesetpriority" in allowed
    platform = parse_platform(nap_spec(example_spec, "a100spot"))
    for pool in _by_kind(nap_objects(platform), "NodePool").values():
        keys = pool["spec"]["template"]["metadata"]["labels"]
        assert all(k in allowed for k in keys if k.startswith("kubernetes.azure.com/"))
        assert not any(k.startswith(("karpenter.sh/", "karpenter.azure.com/")) for k in keys)


@pytest.mark.parametrize("index, kind", [(0, "timeslicing"), (1, "mig")])
def test_validate_refuses_nap_for_shared_and_mig_pools(example_spec, index, kind):
    example_spec["pools"][index]["autoscaler"] = NAP
    with pytest.raises(SpecError) as e:
        parse_platform(example_spec)
    pool = example_spec["pools"][index]
    units = {"timeslicing": "4 shares", "mig": "2 MIG slices"}[kind]
    assert e.value.errors == [
        f"pool {pool['name']!r}: autoscaler: node-auto-provisioning cannot scale a {kind} "
        f"pool: its Karpenter expects a new node to offer the VM's own GPUs as "
        f"nvidia.com/gpu, 1 here (it neither partitions MIG nor shares a GPU), but a node of "
        f"this pool offers {units} as nvidia.com/gpu; use it only for mode exclusive pools "
        f"or CPU-only ones, or autoscaler: cluster-autoscaler"]


def test_validate_refuses_nap_for_mps_pools(example_spec):
    example_spec["pools"][0].update(autoscaler=NAP, sharing={"mode": "mps", "replicas": 4})
    with pytest.raises(SpecError, match="pool 't4dev': autoscaler: node-auto-provisioning "
                                        "cannot scale a mps pool"):
        parse_platform(example_spec)


def test_validate_refuses_a_minimum_size_under_nap(example_spec):
    nap_spec(example_spec, "a100spot")["pools"][2]["minNodes"] = 1
    with pytest.raises(SpecError) as e:
        parse_platform(example_spec)
    assert e.value.errors == [
        "pool 'a100spot': minNodes: 1, but a Karpenter NodePool has no minimum size, so "
        "autoscaler: node-auto-provisioning keeps no node waiting; use 0, or autoscaler: "
        "cluster-autoscaler"]


def test_an_unknown_autoscaler_is_named(example_spec):
    example_spec["pools"][2]["autoscaler"] = "karpenter"
    with pytest.raises(SpecError) as e:
        parse_platform(example_spec)
    assert e.value.errors == ["pool 'a100spot': autoscaler: unknown autoscaler 'karpenter'; "
                              "valid: cluster-autoscaler, node-auto-provisioning"]


async def test_selector_under_nap_is_the_node_pool_label(example_spec, tmp_path,
                                                         offline_kubeconfig):
    """The pod, Kueue's ResourceFlavor and the dev cluster's overhead DaemonSet select
    ``karpenter.sh/nodepool: <pool>``, the label Karpenter puts on every node it starts
    for the NodePool of that name (on AKS and in the dev cluster); a classic pool keeps
    ``kubernetes.azure.com/agentpool``."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(nap_spec(example_spec, "a100spot")))
    platform = parse_platform(yaml.safe_load(spec.read_text()))
    pod = await render_pod(str(spec), "bob", ["ml-eng"], "a100-spot")
    flavor = kueue.resource_flavor(platform.pool("a100spot"))
    assert pod["spec"]["nodeSelector"] == flavor["spec"]["nodeLabels"] == {
        NODEPOOL_LABEL: "a100spot"}
    assert nodes.overhead_daemonset(platform.pool("a100spot"))["spec"]["template"]["spec"][
        "nodeSelector"] == {NODEPOOL_LABEL: "a100spot"}
    assert karpenter.node_pool(platform.pool("a100spot"))["metadata"]["name"] == "a100spot"
    assert _by_kind(nap_objects(platform), "NodePool").keys() == {"a100spot"}
    classic = await render_pod(str(spec), "alice", ["data-science"], "t4-shared")
    assert classic["spec"]["nodeSelector"] == {AGENTPOOL_LABEL: "t4dev"}


def test_both_autoscalers_in_one_cluster_need_a_subscription_feature(example_spec):
    mixed = parse_platform(nap_spec(example_spec, "a100spot"))
    assert [w for w in check_warnings(mixed) if "autoscaler" in w] == [
        "pools: autoscaler: t4dev, a100mig, a100, cpu: cluster-autoscaler; a100spot: "
        "node-auto-provisioning: AKS runs Node Auto Provisioning beside the cluster "
        "autoscaler only in a subscription with the feature Microsoft.ContainerService/"
        "AllowClusterAutoscalerAndNAP registered (see the Terraform docs, Node Auto "
        "Provisioning)"]


def test_nap_alone_needs_no_feature_and_no_autoscaler_profile(example_spec):
    every = [p["name"] for p in example_spec["pools"]]
    platform = parse_platform(nap_spec(example_spec, *every))
    assert not [w for w in check_warnings(platform) if "autoscaler" in w]
    variables = tfvars(platform)
    assert variables == {"acr_name": "jupyterhubgpu", "gpu_pools": {},
                         "node_auto_provisioning": True, "cluster_autoscaler": None}
    assert sorted(_by_kind(nap_objects(platform), "NodePool")) == sorted(
        p.name for p in platform.pools)


# -- check-bundle on a bundle with a NAP pool ---------------------------------------


@pytest.fixture
def nap_bundle(repo_root, tmp_path, example_spec) -> Path:
    """The whole bundle of the example spec with pool a100spot on NAP, generated."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config/platform.yaml").write_text(
        yaml.safe_dump(nap_spec(example_spec, "a100spot")))
    subprocess.run([*CLI, "bundle", "config/platform.yaml", "--write"], capture_output=True,
                   cwd=tmp_path, check=True)
    for tf in (repo_root / "config/terraform").glob("*.tf"):
        shutil.copy(tf, tmp_path / "config/terraform")
    shutil.copy(repo_root / "helm-values/values.yaml", tmp_path / "helm-values")
    return tmp_path


def _check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "check-bundle"], capture_output=True, text=True, cwd=root)


def _edit(path: Path, change) -> None:
    docs = list(yaml.safe_load_all(path.read_text()))
    change(_by_kind(docs, "NodePool")["a100spot"], _by_kind(docs, "AKSNodeClass")["a100spot"])
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def test_check_bundle_passes_on_a_nap_bundle(nap_bundle):
    result = _check(nap_bundle)
    assert result.returncode == 0, result.stdout + result.stderr
    docs = list(yaml.safe_load_all((nap_bundle / "config/kueue.yaml").read_text()))
    flavor = next(d for d in docs if d["kind"] == "ResourceFlavor"
                  and d["metadata"]["name"] == "a100spot")
    assert flavor["spec"]["nodeLabels"] == {NODEPOOL_LABEL: "a100spot"}


NAP_DRIFTS = {
    "more pods per node than the reservations assume": (
        lambda pool, node_class: node_class["spec"].__setitem__("maxPods", 250),
        "config/node-auto-provisioning.yaml: AKSNodeClass a100spot: spec.maxPods: expected "
        "110, found 250 (AKS's kube-reserved memory grows with max_pods; validate and the "
        "Kueue quotas count allocatable for this many)"),
    "AKS installing the driver": (
        lambda pool, node_class: node_class["spec"].pop("gpu"),
        "config/node-auto-provisioning.yaml: AKSNodeClass a100spot: spec.gpu: expected "
        "{'mode': 'None'}, found <missing> (the GPU Operator installs the NVIDIA driver; AKS "
        "must not)"),
    "the agent-pool label in the template": (
        lambda pool, node_class: pool["spec"]["template"]["metadata"]["labels"].__setitem__(
            AGENTPOOL_LABEL, "a100spot"),
        "config/node-auto-provisioning.yaml: NodePool a100spot: spec.template.metadata.labels."
        "kubernetes.azure.com/agentpool: expected <missing>, found 'a100spot' (the pools' "
        "labels; pods and Kueue select the NodePool by karpenter.sh/nodepool)"),
    "a consolidation that evicts notebooks": (
        lambda pool, node_class: pool["spec"]["disruption"].__setitem__(
            "consolidationPolicy", "WhenEmptyOrUnderutilized"),
        "config/node-auto-provisioning.yaml: NodePool a100spot: spec.disruption."
        "consolidationPolicy: expected 'WhenEmpty', found 'WhenEmptyOrUnderutilized' "
        "(WhenEmptyOrUnderutilized would evict running notebooks)"),
    "another VM size": (
        lambda pool, node_class: pool["spec"]["template"]["spec"]["requirements"][0].__setitem__(
            "values", ["Standard_NC48ads_A100_v4"]),
        "config/node-auto-provisioning.yaml: NodePool a100spot: spec.template.spec."
        "requirements[0].values: expected ['Standard_NC24ads_A100_v4'], found "
        "['Standard_NC48ads_A100_v4']"),
}


@pytest.mark.parametrize("case", list(NAP_DRIFTS))
def test_check_bundle_catches_drift_in_the_nap_objects(nap_bundle, case):
    change, message = NAP_DRIFTS[case]
    _edit(nap_bundle / "config/node-auto-provisioning.yaml", change)
    result = _check(nap_bundle)
    assert result.returncode == 1
    assert f"  - {message}\n" in result.stdout, result.stdout


def test_check_bundle_catches_a_node_pool_for_a_nap_pool(nap_bundle, repo_root):
    shutil.copy(repo_root / "config/terraform/pools.auto.tfvars.json",
                nap_bundle / "config/terraform")
    result = _check(nap_bundle)
    assert result.returncode == 1
    assert ('  - config/terraform/pools.auto.tfvars.json: gpu_pools["a100spot"]: (pool): '
            "expected 'absent', found 'present' (its autoscaler is node-auto-provisioning: a "
            "NodePool, not a node pool (config/node-auto-provisioning.yaml))\n") in result.stdout
    assert ("  - config/terraform/pools.auto.tfvars.json: variables: node_auto_provisioning: "
            "expected True, found False\n") in result.stdout
