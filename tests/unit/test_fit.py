"""The pod of every profile fits the cluster objects built for its pool.

Not golden copies of the builders' output: the properties that make a spawn work.
The pod validates against the Kubernetes API; Kueue may admit it to the
ResourceFlavors of its profile's pools and no other, and once admitted there (Kueue's
merge, tests/kueue_admission.py) the pool's nodes accept it; the GPU resource it asks for is the one
the device plugin advertises on those nodes and the node offers; and its queue and
priority labels lead to Kueue objects that cover what it requests.
"""

from __future__ import annotations

import re
from fractions import Fraction

import kubernetes_validate
import pytest
import yaml

from jupyterhub_gpu.builders import deviceplugin, kueue, nodes
from jupyterhub_gpu.bundle import kueueconfig, namespaces
from jupyterhub_gpu.contract import DEVICE_PLUGIN_CONFIG_LABEL
from jupyterhub_gpu.devcluster.build import K8S_VERSION
from jupyterhub_gpu.spec.parse import load_platform
from jupyterhub_gpu.hub.render import render_pod

from .. import kueue_admission as kueue_rules
from ..conftest import REPO
from ..kueue_cases import CASES, model_verdict

SCHEMA_VERSION = K8S_VERSION.lstrip("v").rsplit(".", 1)[0]  # "1.35"
PROFILES = load_platform(REPO / "config" / "platform.yaml").profiles
SLUGS = [p.slug for p in PROFILES]
#: every (profile, pool) a server may run on: a fallback profile's on each of its pools
PLACEMENTS = [(p.slug, name) for p in PROFILES for name in p.pool_names]
_SUFFIX = {"m": Fraction(1, 1000), "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(value) -> Fraction:
    """A Kubernetes resource quantity ("500m", "220Gi", 20.0) as a number."""
    number, suffix = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value)).groups()
    return Fraction(number) * _SUFFIX[suffix]


def advertised(config: dict, node_labels: dict[str, str]) -> set[str]:
    """The extended resources NVIDIA's k8s-device-plugin advertises on a node with
    ``node_labels`` running ``config`` (its documented rules: shared replicas are
    renamed ``<name>.shared`` with renameByDefault; the mixed MIG strategy gives one
    ``nvidia.com/mig-<profile>`` per MIG device the MIG manager made, the single one an
    ``nvidia.com/gpu``)."""
    sharing = config.get("sharing") or {}
    shared = sharing.get("timeSlicing") or sharing.get("mps")
    if shared:
        return {r.get("rename") or r["name"] + (".shared" if shared.get("renameByDefault")
                                                else "") for r in shared["resources"]}
    if config["flags"]["migStrategy"] == "mixed":
        made = node_labels["nvidia.com/mig.config"]
        assert made.startswith("all-") and made != "all-disabled", made
        return {f"nvidia.com/mig-{made.removeprefix('all-')}"}
    return {"nvidia.com/gpu"}


async def _pod(platform, example_spec_path, slug) -> dict:
    """The example profile's pod, as the shared case table (tests/kueue_cases.py) has it."""
    (case,) = [c for c in CASES if c.slug == slug and not c.nap]
    return await render_pod(str(example_spec_path), case.user, [case.group], slug)


def _gpu_limits(container: dict) -> dict[str, str]:
    return {k: v for k, v in container["resources"]["limits"].items()
            if k not in ("cpu", "memory", "ephemeral-storage")}


@pytest.mark.parametrize("slug", SLUGS)
async def test_pod_asks_for_the_profile_and_validates(platform, example_spec_path, slug):
    pod = await _pod(platform, example_spec_path, slug)
    kubernetes_validate.validate(pod, SCHEMA_VERSION, strict=True)
    profile = platform.profile(slug)
    (container,) = pod["spec"]["containers"]
    assert container["image"] == profile.image
    for kind in ("requests", "limits"):
        asks = container["resources"][kind]
        assert quantity(asks["cpu"]) == Fraction(str(profile.cpu))
        assert quantity(asks["memory"]) == profile.memory_bytes
    gpu = [profile.units] if platform.uses_gpu(profile) else []  # a CPU profile: none
    assert [quantity(n) for n in _gpu_limits(container).values()] == gpu


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
async def test_kueue_may_admit_the_pod_to_its_profiles_pools_only(case, tmp_path):
    """Every ClusterQueue lists every pool: the pod's selector or node affinity alone
    keeps Kueue to the profile's pools (the flavors' tolerations pass every taint).
    The model's verdicts on these cases are held against the real Kueue in
    tests/integration/test_kueue_model.py."""
    platform = case.platform(tmp_path)
    admits = model_verdict(await case.pod(tmp_path), platform)
    assert sorted(admits) == sorted(platform.profile(case.slug).pool_names)


@pytest.mark.parametrize("slug, pool_name", PLACEMENTS)
async def test_pool_flavor_and_nodes_take_the_pod(platform, example_spec_path, slug,
                                                  pool_name):
    pod = await _pod(platform, example_spec_path, slug)
    pool = platform.pool(pool_name)
    flavor = kueue.resource_flavor(pool)
    admitted = kueue_rules.admit(pod, flavor)["spec"]  # raises on a selector conflict
    assert flavor["spec"]["nodeLabels"].items() <= admitted["nodeSelector"].items()
    node = nodes.fake_node(pool, 0)
    assert kueue_rules.node_takes(admitted, node)
    assert node["spec"]["taints"] == flavor["spec"]["nodeTaints"]
    for other in platform.pools:  # and the nodes of no other pool
        if other.name not in platform.profile(slug).pool_names:
            assert not kueue_rules.node_takes(admitted, nodes.fake_node(other, 0)), other.name
    allocatable = node["status"]["allocatable"]
    for name, amount in pod["spec"]["containers"][0]["resources"]["requests"].items():
        assert quantity(amount) <= quantity(allocatable.get(name, 0)), name


@pytest.mark.parametrize("slug, pool_name", PLACEMENTS)
async def test_gpu_resource_is_the_one_the_device_plugin_advertises(platform, example_spec_path,
                                                                    slug, pool_name):
    pod = await _pod(platform, example_spec_path, slug)
    pool = platform.pool(pool_name)
    node = nodes.fake_node(pool, 0)
    labels = node["metadata"]["labels"]
    if not pool.has_gpu:  # a CPU-only pool: no device plugin, no GPU resource
        assert DEVICE_PLUGIN_CONFIG_LABEL not in labels
        assert _gpu_limits(pod["spec"]["containers"][0]) == {}
        return
    configs = deviceplugin.config_map(platform)["data"]
    config = yaml.safe_load(configs[labels[DEVICE_PLUGIN_CONFIG_LABEL]])
    (resource,) = _gpu_limits(pod["spec"]["containers"][0])
    assert advertised(config, labels) == {resource}
    assert quantity(node["status"]["capacity"][resource]) == pool.units_per_node


@pytest.mark.parametrize("slug, pool_name", PLACEMENTS)
async def test_queue_labels_lead_to_kueue_objects_covering_the_pod(platform, example_spec_path,
                                                                    slug, pool_name):
    pod = await _pod(platform, example_spec_path, slug)
    meta, pool = pod["metadata"], platform.pool(pool_name)
    team = next(t for t in platform.teams if t.namespace == meta["namespace"])
    ns_labels = {**namespaces.namespace(team)["metadata"]["labels"],
                 "kubernetes.io/metadata.name": team.namespace}  # set by the API server
    managed = kueueconfig.kueue_configuration(platform)["managedJobsNamespaceSelector"]
    assert managed["matchLabels"].items() <= ns_labels.items()
    objects = kueue.kueue_objects(platform)

    def named(kind, name, namespace=None):
        (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name
                  and o["metadata"].get("namespace") == namespace]
        return obj

    local = named("LocalQueue", meta["labels"]["kueue.x-k8s.io/queue-name"], team.namespace)
    queue = named("ClusterQueue", local["spec"]["clusterQueue"])["spec"]
    assert queue["namespaceSelector"]["matchLabels"].items() <= ns_labels.items()
    requested = set(pod["spec"]["containers"][0]["resources"]["requests"])
    (group,) = [g for g in queue["resourceGroups"] if pool.name in
                [f["name"] for f in g["flavors"]]]
    assert requested <= set(group["coveredResources"])
    priority = named("WorkloadPriorityClass", meta["labels"]["kueue.x-k8s.io/priority-class"])
    assert priority["value"] == platform.priority(platform.profile(slug).priority).value
