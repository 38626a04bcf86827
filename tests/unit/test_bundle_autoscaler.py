"""Scale-up from 0: the node the Azure cluster-autoscaler imagines for an empty GPU pool
must be able to run every profile's pending pod.

For a scale set with no instance, the autoscaler builds its node template from the VM
SKU (cpu, memory and ``nvidia.com/gpu``) and from the scale set's tags
(kubernetes/autoscaler, ``cluster-autoscaler/cloudprovider/azure/azure_template.go``:
``extractAllocatableResourcesFromScaleSet``, ``extractLabelsFromTags``,
``extractTaintsFromTags``). The decoder below is written from that rule, not from our
encoder: a tag ``k8s.io_cluster-autoscaler_node-template_<kind>_<name>`` gives, for

* ``resources``: the capacity ``<name>`` with ``_`` and ``~2`` both read as ``/``;
* ``label``: the label ``<name>`` with ``_`` read as ``/``, then ``~2`` as ``_``;
* ``taint``: the taint key decoded like a label, the value ``<value>:<Effect>`` (a tag
  whose value does not match ``(.*):(NoSchedule|NoExecute|PreferNoSchedule)`` is
  ignored).

The pod is the one GPUSpawner creates (``render_pod``), as Kueue leaves it once it has
admitted it to the pool's ResourceFlavor (tests/kueue_admission.py): a fallback
profile's, on each of its pools.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jupyterhub_gpu.builders.kueue import kueue_objects
from jupyterhub_gpu.spec.parse import load_platform
from jupyterhub_gpu.hub.render import render_pod

from .. import kueue_admission as kueue_rules

PREFIX = "k8s.io_cluster-autoscaler_node-template_"
EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "platform.yaml"
PROFILES = load_platform(EXAMPLE).profiles
#: every (profile, pool) a server may run on: a fallback profile's on each of its pools
PLACEMENTS = [(p.slug, name) for p in PROFILES for name in p.pool_names]
TAINT_VALUE = re.compile(r"(.*):(?:NoSchedule|NoExecute|PreferNoSchedule)")


def _after(tag: str, kind: str) -> str | None:
    """Go's ``strings.Split(tag, marker)[1]``, or None when the marker is absent."""
    parts = tag.split(f"{PREFIX}{kind}_")
    return parts[1] if len(parts) > 1 else None


def template_node(sku_gpus: int, tags: dict[str, str]) -> dict:
    """The autoscaler's template node for an empty scale set with these tags."""
    capacity = {"nvidia.com/gpu": sku_gpus}
    labels: dict[str, str] = {}
    taints: list[dict] = []
    for tag, value in tags.items():
        if name := _after(tag, "resources"):
            capacity[name.replace("_", "/").replace("~2", "/")] = int(value)
        if (name := _after(tag, "label")) is not None:
            key = name.replace("_", "/").replace("~2", "_")
            if key:
                labels[key] = value
        if (name := _after(tag, "taint")) is not None and TAINT_VALUE.search(value):
            taint_value, effect = value.split(":", 1)
            taints.append({"key": name.replace("_", "/").replace("~2", "_"),
                           "value": taint_value, "effect": effect})
    return {"capacity": capacity, "labels": labels, "taints": taints}


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' toleration matching (v1.Toleration.ToleratesTaint)."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator") == "Exists":
        return True
    return toleration.get("value", "") == taint.get("value", "")


def why_not_schedulable(pod: dict, node: dict) -> list[str]:
    """What keeps the pod off the template node: [] if it fits."""
    spec = pod["spec"]
    problems = []
    for container in spec["containers"]:
        for name, amount in (container.get("resources", {}).get("limits") or {}).items():
            if "/" in name and int(amount) > node["capacity"].get(name, 0):
                problems.append(f"requests {amount} {name}, template has "
                                f"{node['capacity'].get(name, 0)}")
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node["labels"].get(key) != value:
            problems.append(f"nodeSelector {key}={value}, template has "
                            f"{node['labels'].get(key, '<no label>')}")
    if not kueue_rules.selects({"affinity": spec.get("affinity")}, node["labels"]):
        problems.append(f"required node affinity {spec['affinity']['nodeAffinity']}, "
                        f"template labels {node['labels']}")
    for taint in node["taints"]:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not any(
                tolerates(t, taint) for t in spec.get("tolerations") or []):
            problems.append(f"taint {taint} not tolerated")
    return problems


def node_pool_tags(repo_root, pool_name: str) -> dict[str, str]:
    """The tags Terraform gives the pool (and AKS its scale set): ``var.tags``'
    default merged with the pool's generated ``autoscaler_tags``."""
    entry = json.loads((repo_root / "config/terraform/pools.auto.tfvars.json").read_text())[
        "gpu_pools"][pool_name]
    return {"app": "jupyterhub-gpu", **entry.get("autoscaler_tags", {})}


def _groups_for(platform, profile) -> list[str]:
    return [*profile.allowed_groups, platform.teams[0].groups[0]]


async def _admitted_pod(platform, example_spec_path, profile, pool_name=None) -> dict:
    """The profile's pod as Kueue leaves it once admitted to ``pool_name`` (the
    profile's preferred pool by default)."""
    pod = await render_pod(str(example_spec_path), "alice", _groups_for(platform, profile),
                           profile.slug)
    name = pool_name or profile.pool
    flavor = next(o for o in kueue_objects(platform)
                  if o["kind"] == "ResourceFlavor" and o["metadata"]["name"] == name)
    return kueue_rules.admit(pod, flavor)


@pytest.mark.parametrize("slug, pool_name", PLACEMENTS)
async def test_pending_profile_pod_fits_the_scale_from_zero_template(
        platform, example_spec_path, repo_root, slug, pool_name):
    profile = platform.profile(slug)
    pool = platform.pool(pool_name)
    pod = await _admitted_pod(platform, example_spec_path, profile, pool_name)
    node = template_node(pool.gpus_per_node, node_pool_tags(repo_root, pool.name))
    assert why_not_schedulable(pod, node) == []
    for name, units in pool.gpu_resources(pool.units_per_node).items():  # none: CPU pool
        assert node["capacity"][name] == int(units)
    assert {(t.key, t.value, t.effect) for t in pool.taints} == {
        (t["key"], t["value"], t["effect"]) for t in node["taints"]}


async def test_the_vm_sku_alone_cannot_run_a_shared_or_mig_pod(platform, example_spec_path):
    """Why the tags are needed: without them the template offers only nvidia.com/gpu."""
    for slug in ("t4-shared", "a100-mig-3g"):
        profile = platform.profile(slug)
        pool = platform.pool(profile.pool)
        pod = await _admitted_pod(platform, example_spec_path, profile)
        problems = why_not_schedulable(pod, template_node(pool.gpus_per_node, {}))
        assert f"requests {profile.units} {pool.resource_name}, template has 0" in problems


def test_decoder_follows_the_documented_rule():
    """The autoscaler README's own examples, and its ``~2`` escape."""
    node = template_node(1, {
        f"{PREFIX}label_foo": "bar",
        f"{PREFIX}label_k8s.io_foo": "bar",
        f"{PREFIX}label_cpu~2arch": "x86",
        f"{PREFIX}taint_k8s.io_foo": "bar:NoSchedule",
        f"{PREFIX}taint_ignored": "no-effect",
        f"{PREFIX}resources_cpu": "3",
        f"{PREFIX}resources_example.com_dev~2ice": "2",
    })
    assert node["labels"] == {"foo": "bar", "k8s.io/foo": "bar", "cpu_arch": "x86"}
    assert node["taints"] == [{"key": "k8s.io/foo", "value": "bar", "effect": "NoSchedule"}]
    assert node["capacity"] == {"nvidia.com/gpu": 1, "cpu": 3, "example.com/dev/ice": 2}


def test_terraform_page_shows_the_generated_tags(repo_root):
    page = (repo_root / "docs/terraform.md").read_text()
    rows = re.findall(r"^\| `(k8s\.io_cluster-autoscaler_[^`]+)` \| `([^`]+)` \|", page, re.M)
    assert rows
    tags = node_pool_tags(repo_root, "t4dev")
    assert all(tags.get(tag) == value for tag, value in rows), rows
