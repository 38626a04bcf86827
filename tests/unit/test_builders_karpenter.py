"""The Karpenter objects built from the spec: the instance-types file in the shape the
kwok provider's Go structs decode, and NodePools / KWOKNodeClasses valid for the CRDs of
the pinned ``sigs.k8s.io/karpenter`` module and selecting what the spawner and Kueue
select."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from jupyterhub_gpu.builders import karpenter, kueue, nodes
from jupyterhub_gpu.spec.parse import parse_platform
from jupyterhub_gpu.spec.quantities import format_duration, parse_cpu, parse_memory

from .test_schemas import _crd_schema


def _go_struct_fields(source: str, struct: str) -> dict[str, str]:
    """Exported fields of a Go struct -> the JSON key encoding/json decodes them from
    (the ``json`` tag's name, else the field name); embedded structs -> ``<embedded>``."""
    body = re.search(rf"^type {struct} struct {{\n(.*?)^}}", source, re.M | re.S)
    assert body, f"struct {struct} not found"
    fields = {}
    for line in body.group(1).splitlines():
        line = line.split("//")[0].strip()
        if not line:
            continue
        parts = line.split(maxsplit=2)
        if len(parts) == 1:
            fields[parts[0]] = "<embedded>"
        elif parts[0][0].isupper():
            tag = re.search(r'json:"([^",]*)', line)
            fields[parts[0]] = tag.group(1) if tag and tag.group(1) else parts[0]
    return fields


def test_instance_types_file_uses_only_keys_the_go_structs_decode(platform, karpenter_module):
    """Go ignores unknown JSON keys: a misspelt key would silently drop a resource or
    the price. Every key written must be one the provider's structs decode."""
    helpers = (karpenter_module / "kwok/cloudprovider/helpers.go").read_text()
    types = (karpenter_module / "pkg/cloudprovider/types.go").read_text()
    top = set(_go_struct_fields(helpers, "InstanceTypeOptions").values())
    kwok_offering = _go_struct_fields(helpers, "KWOKOffering")
    assert kwok_offering.pop("cloudprovider.Offering") == "<embedded>"
    offering = set(kwok_offering.values()) | set(_go_struct_fields(types, "Offering").values())
    written = json.loads(karpenter.instance_types_json(platform))
    assert len(written) == len(platform.pools)
    for entry in written:
        assert set(entry) <= top, set(entry) - top
        for off in entry["offerings"]:
            assert set(off) <= offering, set(off) - offering
            for req in off["Requirements"]:
                assert set(req) == {"key", "operator", "values"}


def test_the_upstream_default_file_has_the_same_shape(platform, karpenter_module):
    upstream = json.loads((karpenter_module / "kwok/cloudprovider/instance_types.json").read_text())
    ours = json.loads(karpenter.instance_types_json(platform))
    assert set(ours[0]) == set(upstream[0])
    assert set(ours[0]["offerings"][0]) <= set(upstream[0]["offerings"][0])


def test_one_instance_type_per_pool_with_its_gpu_resource_price_and_capacity_type(platform):
    by_name = {t["name"]: t for t in json.loads(karpenter.instance_types_json(platform))}
    mig = by_name["Standard_NC24ads_A100_v4-a100mig"]
    # two MIG slices, each an nvidia.com/gpu (single strategy), not the VM's one A100
    assert mig["resources"]["nvidia.com/gpu"] == "2"
    assert not any(r.startswith("nvidia.com/mig-") for r in mig["resources"])
    assert by_name["Standard_NC8as_T4_v3-t4dev"]["resources"]["nvidia.com/gpu"] == "4"
    (spot_offer,) = by_name["Standard_NC24ads_A100_v4-a100spot"]["offerings"]
    assert spot_offer["Price"] == 1.102
    assert {"key": "karpenter.sh/capacity-type", "operator": "In",
            "values": ["spot"]} in spot_offer["Requirements"]
    (mig_offer,) = mig["offerings"]
    assert ["on-demand"] in [r["values"] for r in mig_offer["Requirements"]
                             if r["key"] == "karpenter.sh/capacity-type"]


def test_node_karpenter_starts_offers_what_a_static_node_offers(platform):
    """The provider subtracts a fixed 100m / 10Mi from the instance type's resources."""
    for pool in platform.pools:
        resources = karpenter.instance_type(pool)["resources"]
        static = nodes.node_allocatable(pool)  # what a static node's kubelet reports
        assert (int(resources["cpu"].removesuffix("m")) - 100
                == round(parse_cpu(static["cpu"]) * 1000))
        assert parse_memory(resources["memory"]) - 10 * 2**20 == parse_memory(static["memory"])
        gpu = {k: v for k, v in resources.items() if k not in ("cpu", "memory", "pods")}
        assert gpu == {k: v for k, v in static.items() if k not in ("cpu", "memory", "pods")}
        assert gpu == pool.gpu_resources(pool.units_per_node)


def test_a_cpu_pool_instance_type_offers_no_gpu(platform):
    """Karpenter starts a CPU node only for a pod that asks for no GPU resource."""
    it = karpenter.instance_type(platform.pool("cpu"))
    assert it["name"] == "Standard_D8s_v5-cpu"
    assert set(it["resources"]) == {"cpu", "memory", "pods"}
    assert karpenter.node_pool(platform.pool("cpu"))["spec"]["template"]["spec"]["taints"] == [
        {"key": "hub.jupyter.org/dedicated", "value": "user", "effect": "NoSchedule"}]


def test_node_pool_selects_what_the_flavor_and_the_pod_select(platform):
    for pool in platform.pools:
        spec = karpenter.node_pool(pool)["spec"]
        labels = spec["template"]["metadata"]["labels"]
        flavor = kueue.resource_flavor(pool)["spec"]
        assert flavor["nodeLabels"].items() <= labels.items()
        assert spec["template"]["spec"]["taints"] == flavor["nodeTaints"]
        assert pool.node_selector.items() <= labels.items()
        static = nodes.fake_node(pool, 0)["metadata"]["labels"]
        assert labels.items() <= static.items()


def test_spot_pool_node_pool(platform):
    pool = platform.pool("a100spot")
    assert karpenter.node_pool(pool) == {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "a100spot"},
        "spec": {
            "template": {
                "metadata": {"labels": karpenter.template_labels(pool)},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass",
                                     "name": "a100spot"},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In",
                         "values": ["Standard_NC24ads_A100_v4-a100spot"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In",
                         "values": ["spot"]},
                    ],
                    "taints": [t.as_dict() for t in pool.taints],
                    "expireAfter": "Never",
                },
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m",
                           "budgets": [{"nodes": "100%", "reasons": ["Empty"]},
                                       {"nodes": "0", "reasons": ["Drifted"]}]},
            "limits": {"nodes": "5"},
        },
    }
    assert karpenter.template_labels(pool)["kubernetes.azure.com/scalesetpriority"] == "spot"


def test_spec_fields_reach_the_node_pool_and_node_class(example_spec):
    example_spec["pools"][0].update(minNodes=2, maxNodes=5, consolidateAfter="0s",
                                    bootTime="1m30s")
    pool = parse_platform(example_spec).pool("t4dev")
    spec = karpenter.node_pool(pool)["spec"]
    assert spec["limits"] == {"nodes": "3"}, "the 2 static nodes count towards maxNodes"
    assert spec["disruption"]["consolidateAfter"] == "0s"
    assert karpenter.node_class(pool) == {
        "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
        "metadata": {"name": "t4dev"}, "spec": {"nodeRegistrationDelay": "1m30s"}}


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (45, "45s"), (600, "10m"),
                                          (5400, "1h30m"), (3661, "1h1m1s")])
def test_go_durations(seconds, text):
    assert format_duration(seconds) == text


def test_objects_match_the_karpenter_crds(platform, karpenter_crds):
    objects = karpenter.karpenter_objects(platform)
    n = len(platform.pools)
    assert [o["kind"] for o in objects] == ["KWOKNodeClass"] * n + ["NodePool"] * n
    for obj in objects:
        group, version = obj["apiVersion"].split("/")
        crd = karpenter_crds[obj["kind"]]
        assert crd["spec"]["group"] == group
        jsonschema.validate(obj, _crd_schema(karpenter_crds, obj["kind"], version))


def test_strict_node_pool_schema_catches_a_misspelt_field(platform, karpenter_crds):
    pool = karpenter.node_pool(platform.pools[0])
    pool["spec"]["disruption"]["consolidateAfterSeconds"] = 600
    with pytest.raises(jsonschema.ValidationError, match="consolidateAfterSeconds"):
        jsonschema.validate(pool, _crd_schema(karpenter_crds, "NodePool", "v1"))
