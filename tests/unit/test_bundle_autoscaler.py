"""Scale-up from 0: the node the Azure cluster-autoscaler imagines for an empty GPU pool
must be able to run every profile's pending pod.

For a scale set with no instance, the autoscaler builds its node template from the VM
SKU (cpu, memory and its GPUs as ``nvidia.com/gpu``) and from the scale set's tags
(kubernetes/autoscaler, ``cluster-autoscaler/cloudprovider/azure/azure_template.go``:
``extractAllocatableResourcesFromScaleSet``, ``extractLabelsFromTags``,
``extractTaintsFromTags``). Our tags come from ``bundle/autoscaler.template_tags``;
:data:`UPSTREAM_EXAMPLES`, the autoscaler's own documented examples (its Azure
``README.md`` and ``azure_template_test.go``), hold that encoder to the autoscaler's
rule. The template node is then read through the encoder: it has the label ``k=v``
when the tags hold ``v`` under the encoder's tag for ``k``, and so on, so no second
copy of the rule lives here.

The pod is the one GPUSpawner creates (``render_pod``), as Kueue leaves it once it has
admitted it to the pool's ResourceFlavor (tests/kueue_admission.py): a fallback
profile's, on each of its pools.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import pytest

from jupyterhub_gpu.builders.kueue import kueue_objects
from jupyterhub_gpu.bundle.autoscaler import TAINT, TagError, template_tags
from jupyterhub_gpu.spec.model import Taint
from jupyterhub_gpu.spec.parse import load_platform
from jupyterhub_gpu.hub.render import render_pod

from .. import kueue_admission as kueue_rules

PREFIX = "k8s.io_cluster-autoscaler_node-template_"
EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "platform.yaml"
PROFILES = load_platform(EXAMPLE).profiles
#: every (profile, pool) a server may run on: a fallback profile's on each of its pools
PLACEMENTS = [(p.slug, name) for p in PROFILES for name in p.pool_names]

#: (what the node gets, the tag that gives it) in the autoscaler's own examples: its
#: Azure README's "Examples" (labels, taints, resources) and azure_template_test.go
#: (TestExtractLabelsFromTags, TestExtractTaintsFromTags,
#: TestExtractAllocatableResourcesFromScaleSet)
UPSTREAM_EXAMPLES = [
    ({"labels": {"foo": "bar"}}, ("label_foo", "bar")),
    ({"labels": {"k8s.io/foo": "bar"}}, ("label_k8s.io_foo", "bar")),
    ({"labels": {"zip": "zap"}}, ("label_zip", "zap")),
    ({"labels": {"spam/egg": "foo"}}, ("label_spam_egg", "foo")),
    ({"labels": {"foo_bar": "egg"}}, ("label_foo~2bar", "egg")),
    ({"taints": [Taint("foo", "bar", "NoSchedule")]}, ("taint_foo", "bar:NoSchedule")),
    ({"taints": [Taint("k8s.io/foo", "bar", "NoSchedule")]},
     ("taint_k8s.io_foo", "bar:NoSchedule")),
    ({"taints": [Taint("dedicated", "foo", "NoSchedule")]},
     ("taint_dedicated", "foo:NoSchedule")),
    ({"taints": [Taint("group", "bar", "NoExecute")]}, ("taint_group", "bar:NoExecute")),
    ({"taints": [Taint("app", "fizz", "PreferNoSchedule")]},
     ("taint_app", "fizz:PreferNoSchedule")),
    ({"taints": [Taint("k8s.io/testing/underscore/to/slash", "fizz", "PreferNoSchedule")]},
     ("taint_k8s.io_testing_underscore_to_slash", "fizz:PreferNoSchedule")),
    ({"resources": {"cpu": "3800m"}}, ("resources_cpu", "3800m")),
    ({"resources": {"memory": "11Gi"}}, ("resources_memory", "11Gi")),
    ({"resources": {"ephemeral-storage": "20G"}}, ("resources_ephemeral-storage", "20G")),
]


def _the_tag(resources=None, labels=None, taints=()) -> str:
    """The one tag name ``template_tags`` gives a single resource, label or taint."""
    (tag,) = template_tags(resources or {}, labels or {}, taints)
    return tag


@dataclass(frozen=True)
class TemplateNode:
    """The autoscaler's template node for an empty scale set: its VM SKU's GPUs, and
    what its ``tags`` say, read through our encoder."""

    sku_gpus: int
    tags: Mapping[str, str]

    def capacity(self, name: str) -> int:
        default = self.sku_gpus if name == "nvidia.com/gpu" else 0
        return int(self.tags.get(_the_tag(resources={name: 0}), default))

    def labels(self, keys: set[str]) -> dict[str, str]:
        """The node's labels of these keys."""
        tags = {key: _the_tag(labels={key: ""}) for key in keys}
        return {key: self.tags[tag] for key, tag in tags.items() if tag in self.tags}

    def taints(self) -> list[dict]:
        """Its taints, each keyed by its tag name (the autoscaler ignores a taint tag
        whose value names no effect: ours always name one)."""
        return [{"key": tag, "value": value.rsplit(":", 1)[0],
                 "effect": value.rsplit(":", 1)[1]}
                for tag, value in self.tags.items() if tag.startswith(TAINT)]


def _toleration_in_tags(toleration: dict) -> dict | None:
    """``toleration`` with its key as a taint tag name (None: no tag has that key)."""
    if not toleration.get("key"):
        return toleration
    try:
        return {**toleration, "key": _the_tag(taints=[Taint(toleration["key"], "")])}
    except TagError:
        return None


def _selected_keys(spec: dict) -> set[str]:
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    return {*(spec.get("nodeSelector") or {}),
            *(e["key"] for term in affinity.get("nodeSelectorTerms") or []
              for e in term.get("matchExpressions") or [])}


def why_not_schedulable(pod: dict, node: TemplateNode) -> list[str]:
    """What keeps the pod off the template node: [] if it fits."""
    spec = pod["spec"]
    problems = []
    for container in spec["containers"]:
        for name, amount in (container.get("resources", {}).get("limits") or {}).items():
            if "/" in name and int(amount) > node.capacity(name):
                problems.append(f"requests {amount} {name}, template has "
                                f"{node.capacity(name)}")
    labels = node.labels(_selected_keys(spec))
    if not kueue_rules.selects(spec, labels):
        problems.append(f"nodeSelector {spec.get('nodeSelector')} and required node "
                        f"affinity {spec.get('affinity')}, template labels {labels}")
    tolerations = [t for t in map(_toleration_in_tags, spec.get("tolerations") or []) if t]
    for taint in node.taints():
        if taint["effect"] in ("NoSchedule", "NoExecute") and not kueue_rules.tolerates(
                tolerations, taint):
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
    node = TemplateNode(pool.gpus_per_node, node_pool_tags(repo_root, pool.name))
    assert why_not_schedulable(pod, node) == []
    for name, units in pool.gpu_resources(pool.units_per_node).items():  # none: CPU pool
        assert node.capacity(name) == int(units)
    assert sorted((_the_tag(taints=[t]), t.value, t.effect) for t in pool.taints) == sorted(
        (t["key"], t["value"], t["effect"]) for t in node.taints())


def test_the_vm_sku_alone_undercounts_a_shared_or_mig_node(platform, repo_root):
    """Why the resource tags are needed: without them the template offers the VM's own
    GPUs as nvidia.com/gpu (one T4, one A100), not a node's 4 time-sliced shares or 2
    MIG slices, which are nvidia.com/gpu too; the tags replace the SKU's count."""
    for name in ("t4dev", "a100mig"):
        pool = platform.pool(name)
        bare = TemplateNode(pool.gpus_per_node, {})
        tagged = TemplateNode(pool.gpus_per_node, node_pool_tags(repo_root, name))
        assert pool.resource_name == "nvidia.com/gpu"
        assert bare.capacity("nvidia.com/gpu") == 1
        assert tagged.capacity("nvidia.com/gpu") == pool.units_per_node > 1


@pytest.mark.parametrize("gets, tag", UPSTREAM_EXAMPLES)
def test_the_tags_are_the_ones_the_autoscaler_documents(gets, tag):
    name, value = tag
    assert template_tags(gets.get("resources", {}), gets.get("labels", {}),
                         gets.get("taints", ())) == {PREFIX + name: value}


def test_upstreams_capitalised_resource_example_is_refused():
    """azure_template_test.go's ``nvidia.com_Tesla-P100-PCIE`` decodes to a name with
    capitals, which AKS's lower-cased tag names cannot carry."""
    with pytest.raises(TagError, match="lower-cases"):
        template_tags({"nvidia.com/Tesla-P100-PCIE": 4}, {}, ())


def test_terraform_page_shows_the_generated_tags(repo_root):
    page = (repo_root / "docs/terraform.md").read_text()
    rows = re.findall(r"^\| `(k8s\.io_cluster-autoscaler_[^`]+)` \| `([^`]+)` \|", page, re.M)
    assert rows
    tags = node_pool_tags(repo_root, "t4dev")
    assert all(tags.get(tag) == value for tag, value in rows), rows
