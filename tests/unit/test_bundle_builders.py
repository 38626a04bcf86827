"""Golden tests of the bundle's pure builders: team namespaces and the hub's RBAC,
Kueue's Configuration, the Terraform pool variables (with the autoscaler's tags) and
the generated Helm values."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from jupyterhub_gpu.spec.images import package_version
from jupyterhub_gpu.builders.deviceplugin import pool_labels
from jupyterhub_gpu.bundle import autoscaler, helm, kueueconfig, namespaces, terraform
from jupyterhub_gpu.bundle.autoscaler import LABEL, RESOURCES, TAINT
from jupyterhub_gpu.devcluster import kueue_setup
from jupyterhub_gpu.devcluster.build import K8S_VERSION, PINS
from jupyterhub_gpu.devcluster.layout import Ports
from jupyterhub_gpu.spec import boot
from jupyterhub_gpu.spec.gpus import GPU_MODELS
from jupyterhub_gpu.spec.parse import parse_platform
from jupyterhub_gpu.spec.quantities import format_duration
from jupyterhub_gpu.spec.model import Taint

VERSION = package_version()  # the image tag: pyproject.toml's version, installed

SCHEMA_VERSION = K8S_VERSION.lstrip("v").rsplit(".", 1)[0]
READ = ["get", "list", "watch"]


def test_namespace_and_hub_rbac(platform):
    team = platform.teams[0]
    hub = namespaces.HubRef("hub-ns", "hub-sa")
    assert namespaces.namespace(team) == {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "jhub-data-science", "labels": {
            "jupyterhub-gpu/managed": "true", "jupyterhub-gpu/team": "data-science",
            # Pod Security: restricted enforced at a pinned version (issue #25)
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "v1.33",
            "pod-security.kubernetes.io/warn": "restricted",
            "pod-security.kubernetes.io/warn-version": "latest",
            "pod-security.kubernetes.io/audit": "restricted",
            "pod-security.kubernetes.io/audit-version": "latest"}}}
    assert namespaces.hub_role(team)["rules"] == [
        {"apiGroups": [""], "resources": ["pods", "persistentvolumeclaims"],
         "verbs": [*READ, "create", "delete"]},
        # the pool gate of a fallback profile's pod (kueue/poolgate.py): pods only
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": READ},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"],
         "verbs": READ},
        {"apiGroups": ["visibility.kueue.x-k8s.io"],
         "resources": ["localqueues/pendingworkloads"], "verbs": READ},
        # training jobs the hub submits for users, and a multi-pod job's rendezvous
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": [*READ, "create", "delete"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": [*READ, "create", "delete"]},
        # ... and its pods' NetworkPolicy (builders/job.py: peer_policy): no reading
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
         "verbs": ["create", "delete"]},
        # a job's log for its user (the gpu-jobs service)
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]
    assert namespaces.hub_role_binding(team, hub) == {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "jupyterhub-gpu-hub", "namespace": "jhub-data-science"},
        "subjects": [{"kind": "ServiceAccount", "name": "hub-sa", "namespace": "hub-ns"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "jupyterhub-gpu-hub"}}


def test_the_hubs_cluster_rbac_reads_nodes_only(platform):
    """The hub's node watch (jupyterhub_gpu_pool_nodes) is its only cluster-scoped
    right; named by the hub's namespace, so two hubs in one cluster do not clash."""
    hub = namespaces.HubRef("hub-ns", "hub-sa")
    objects = namespaces.team_objects(platform, hub)
    cluster = [o for o in objects if "namespace" not in o["metadata"] and o["kind"] != "Namespace"
               and "user-scheduler" not in o["metadata"]["name"]]  # the next test's
    assert cluster == [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "jupyterhub-gpu-hub-hub-ns"},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": READ}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "jupyterhub-gpu-hub-hub-ns"},
         "subjects": [{"kind": "ServiceAccount", "name": "hub-sa", "namespace": "hub-ns"}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "jupyterhub-gpu-hub-hub-ns"}}]


def test_team_objects_cover_every_team_and_are_valid(platform):
    objects = namespaces.team_objects(platform)
    kinds = [(o["kind"], o["metadata"].get("namespace", o["metadata"]["name"])) for o in objects]
    for team in platform.teams:
        for kind in ("Namespace", "Role", "RoleBinding", "NetworkPolicy",
                     "PersistentVolumeClaim"):
            assert (kind, team.namespace) in kinds
    for obj in objects:
        kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)


def test_network_policy_admits_only_hub_and_proxy(platform):
    policy = namespaces.network_policy(platform.teams[0], namespaces.HubRef())
    ingress = policy["spec"]["ingress"]
    assert ingress == [{"from": [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "jupyterhub"}},
        "podSelector": {"matchExpressions": [
            {"key": "component", "operator": "In", "values": ["hub", "proxy"]}]}}],
        "ports": [{"port": 8888}]}]
    internet = policy["spec"]["egress"][-1]["to"][0]["ipBlock"]
    assert "169.254.169.254/32" in internet["except"] and "10.0.0.0/8" in internet["except"]


def test_checkpoint_claim_follows_the_spec(platform, example_spec):
    claim = namespaces.checkpoint_claim(platform, platform.teams[1],
                                        namespaces.CheckpointVolume("azurefile-premium", "1Ti"))
    assert claim["metadata"] == {"name": "jupyterhub-gpu-checkpoints",
                                 "namespace": "jhub-ml-eng"}
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"],
                             "storageClassName": "azurefile-premium",
                             "resources": {"requests": {"storage": "1Ti"}}}
    del example_spec["checkpointStorage"]
    for profile in example_spec["profiles"] + example_spec["jobProfiles"]:
        profile.pop("checkpoint", None)
    kinds = {o["kind"] for o in namespaces.team_objects(parse_platform(example_spec))}
    assert "PersistentVolumeClaim" not in kinds


def test_kueue_configuration_golden(platform):
    config = kueueconfig.kueue_configuration(platform)
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["integrations"] == {"frameworks": ["pod", "batch/job"]}
    assert config["manageJobsWithoutQueueName"] is False
    assert config["managedJobsNamespaceSelector"] == {
        "matchLabels": {"jupyterhub-gpu/managed": "true"}}
    assert "fairSharing" not in config  # classical preemption (see builders.preemption)
    assert "namespace" not in config  # the chart's release namespace applies


def test_pods_ready_timeout_outlasts_the_slowest_boot_and_the_longest_start(example_spec):
    """Kueue's waitForPodsReady covers notebooks too: its timeout is the slowest
    pool's bootTime plus the longest profile startTimeout, plus the margin."""
    example_spec["pools"][0]["bootTime"] = "17m"
    example_spec["profiles"][-1]["startTimeout"] = "25m"
    config = kueueconfig.kueue_configuration(parse_platform(example_spec))["waitForPodsReady"]
    margin = kueueconfig.READY_MARGIN_SECONDS
    assert margin > 0
    assert config["timeout"] == config["recoveryTimeout"] == format_duration(
        17 * 60 + 25 * 60 + margin)
    assert config["blockAdmission"] is False
    strategy = config["requeuingStrategy"]
    assert strategy["backoffLimitCount"] > 0 and strategy["timestamp"] == "Eviction"
    assert 0 < strategy["backoffBaseSeconds"] < strategy["backoffMaxSeconds"]


def test_pods_ready_timeout_covers_a_mig_node_by_default(platform):
    """Without bootTime in the spec, a MIG pool's node is given its driver install and
    reboot (15m), so the example's timeout is 15m + 5m + the margin, not 11m."""
    assert platform.pool("a100mig").boot_seconds == 15 * 60
    config = kueueconfig.kueue_configuration(platform)["waitForPodsReady"]
    assert config["timeout"] == format_duration(20 * 60 + kueueconfig.READY_MARGIN_SECONDS)


def test_dev_cluster_manages_the_namespaces_the_bundle_labels(platform):
    """Kueue manages pods in the team namespaces, in the dev cluster as on AKS."""
    shipped = kueueconfig.kueue_configuration(platform)["managedJobsNamespaceSelector"]
    dev = kueue_setup.configuration(platform, Ports(), "/certs")["managedJobsNamespaceSelector"]
    assert dev == shipped
    wanted = shipped["matchLabels"].items()
    assert wanted <= namespaces.namespace(platform.teams[0])["metadata"]["labels"].items()
    assert not wanted <= kueue_setup.namespace("jhub-x")["metadata"].get("labels", {}).items()


def test_dev_cluster_runs_kueue_with_the_shipped_policy(platform, tmp_path):
    """What Kueue manages and how it preempts on the dev cluster is what the bundle ships."""
    from jupyterhub_gpu.devcluster.layout import Ports

    dev = kueue_setup.configuration(platform, Ports(), str(tmp_path))
    shipped = kueueconfig.kueue_configuration(platform)
    assert {k: dev.get(k) for k in kueueconfig.POLICY_KEYS} == \
        {k: shipped.get(k) for k in kueueconfig.POLICY_KEYS}
    assert "fairSharing" not in dev


def _leaves(tree, prefix=()) -> dict:
    """Every leaf of a nested mapping, by its path of keys."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    return {path: leaf for key, value in tree.items()
            for path, leaf in _leaves(value, (*prefix, key)).items()}


def test_dev_cluster_runs_the_shipped_kueue_configuration_plus_the_dev_overlay(
        platform, tmp_path):
    """The dev cluster's Configuration is the shipped one with the named overlay laid
    over it: every field the overlay names has the overlay's value, every other field
    the shipped one, and the overlay names none of the policy keys."""
    from jupyterhub_gpu.devcluster.layout import Ports

    ports = Ports(kueue_webhook=1443, kueue_metrics=1444, kueue_health=1445)
    overlay = _leaves(kueue_setup.dev_overlay(ports, str(tmp_path)))
    shipped = _leaves(kueueconfig.kueue_configuration(platform))
    dev = _leaves(kueue_setup.configuration(platform, ports, str(tmp_path)))
    assert dev == {**shipped, **overlay}
    changed = {path for path, value in dev.items() if shipped.get(path, ...) != value}
    assert changed == set(overlay) - {p for p in overlay if shipped.get(p, ...) == overlay[p]}
    assert {path[0] for path in overlay} == {
        "namespace", "health", "metrics", "webhook", "leaderElection",
        "internalCertManagement", "featureGates"}  # local addresses, certs, one process
    assert not {path[0] for path in overlay} & set(kueueconfig.POLICY_KEYS)


def test_the_dev_overlay_keeps_the_shipped_fields_it_does_not_name(platform, tmp_path):
    """Laying the overlay over a section keeps that section's other shipped fields
    (the leader election's lease name stays, only ``leaderElect`` changes)."""
    from jupyterhub_gpu.devcluster.layout import Ports

    dev = kueue_setup.configuration(platform, Ports(), str(tmp_path))
    shipped = kueueconfig.kueue_configuration(platform)
    assert dev["leaderElection"] == {**shipped["leaderElection"], "leaderElect": False}
    assert dev["controller"] == shipped["controller"]
    assert dev["webhook"]["certDir"] == str(tmp_path)


def _go_json_fields(source: str) -> set[str]:
    return set(re.findall(r'json:"([A-Za-z]+)[,"]', source))


def test_kueue_configuration_fields_exist_in_kueue(kueue_crds, platform):
    """Every key is a field of Kueue's Configuration type at the pinned version
    (``kueue_crds`` provides the module; its apis/config holds the Go types)."""
    pin = PINS["kueue"]
    out = subprocess.run(["go", "mod", "download", "-json", f"{pin.module}@{pin.version}"],
                         capture_output=True, text=True, check=True)
    types = Path(json.loads(out.stdout)["Dir"]) / "apis" / "config" / "v1beta2"
    known = _go_json_fields((types / "configuration_types.go").read_text())
    known |= {"apiVersion", "kind", "leaderElect", "resourceName"}  # TypeMeta, component-base

    def keys(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key not in ("groupKindConcurrency", "matchLabels"):
                    yield key
                    yield from keys(value)
    unknown = sorted(set(keys(kueueconfig.kueue_configuration(platform))) - known)
    assert unknown == [], f"not fields of Kueue {pin.version}'s Configuration: {unknown}"
    assert set(kueueconfig.POLICY_KEYS) <= known


def test_tfvars_golden(platform):
    assert terraform.tfvars(platform)["gpu_pools"]["a100spot"] == {
        "vm_size": "Standard_NC24ads_A100_v4", "gpu": True, "min_count": 0, "max_count": 5,
        "spot": True,
        "node_labels": {"kubernetes.azure.com/scalesetpriority": "spot",
                        "nvidia.com/device-plugin.config": "default",
                        "nvidia.com/mig.config": "all-disabled"},
        "node_taints": ["nvidia.com/gpu=present:NoSchedule",
                        "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"],
        "autoscaler_tags": {
            f"{LABEL}kubernetes.azure.com_agentpool": "a100spot",
            f"{LABEL}kubernetes.azure.com_scalesetpriority": "spot",
            f"{LABEL}nvidia.com_device-plugin.config": "default",
            f"{LABEL}nvidia.com_mig.config": "all-disabled",
            f"{RESOURCES}nvidia.com_gpu": "1",
            f"{TAINT}kubernetes.azure.com_scalesetpriority": "spot:NoSchedule",
            f"{TAINT}nvidia.com_gpu": "present:NoSchedule"}}
    mig = terraform.tfvars(platform)["gpu_pools"]["a100mig"]
    assert "gpu_instance" not in mig and mig["spot"] is False
    assert mig["node_labels"]["nvidia.com/mig.config"] == "all-3g.40gb"
    # two MIG slices, each an nvidia.com/gpu: the tag replaces the VM size's one GPU
    assert mig["autoscaler_tags"][f"{RESOURCES}nvidia.com_gpu"] == "2"
    # a CPU-only pool: no GPU driver setting, GPU taint, device-plugin label or GPU
    # tag; z2jh's user taint, so that no kube-system pod lands there and pins a node
    assert terraform.tfvars(platform)["gpu_pools"]["cpu"] == {
        "vm_size": "Standard_D8s_v5", "gpu": False, "min_count": 0, "max_count": 10,
        "spot": False, "node_labels": {},
        "node_taints": ["hub.jupyter.org/dedicated=user:NoSchedule"],
        "autoscaler_tags": {f"{LABEL}kubernetes.azure.com_agentpool": "cpu",
                            f"{TAINT}hub.jupyter.org_dedicated": "user:NoSchedule"}}


def test_tfvars_taints_and_labels_are_what_the_spawner_selects(platform):
    for pool in platform.pools:
        entry = terraform.pool_vars(pool)
        assert entry["node_taints"] == [f"{t['key']}={t['value']}:{t['effect']}"
                                        for t in (t.as_dict() for t in pool.taints)]
        assert pool_labels(pool).items() <= entry["node_labels"].items()


@pytest.mark.parametrize("mig", [p.name for p in GPU_MODELS["A100-80GB"].mig])
def test_every_mig_profile_is_left_to_the_mig_manager(platform, mig):
    """AKS's gpu_instance made one geometry per compute size; the GPU Operator's MIG
    manager makes each profile from its config ``all-<profile>``."""
    pool = platform.pool("a100mig")
    pool = dataclasses.replace(pool, sharing=dataclasses.replace(pool.sharing, mig_profile=mig))
    entry = terraform.pool_vars(pool)
    assert entry["node_labels"]["nvidia.com/mig.config"] == f"all-{mig}"
    assert entry["autoscaler_tags"][f"{RESOURCES}nvidia.com_gpu"] == str(
        pool.units_per_node)
    assert "gpu_instance" not in entry


def test_tags_escape_underscores_in_labels_and_taints():
    tags = autoscaler.template_tags({}, {"example.com/cpu_arch": "x86"},
                                    [Taint("example.com/dedi_cated", "yes", "NoExecute")])
    assert tags == {f"{LABEL}example.com_cpu~2arch": "x86",
                    f"{TAINT}example.com_dedi~2cated": "yes:NoExecute"}


@pytest.mark.parametrize("resources, labels, taints, error", [
    ({"example.com/a_b": 1}, {}, [],
     "resource 'example.com/a_b': the autoscaler reads '_' in a resource tag as '/'"),
    ({}, {"example.com/Zone": "a"}, [],
     "label 'example.com/Zone': AKS lower-cases node pool tag names, so the autoscaler "
     "would read 'example.com/zone'"),
    ({}, {}, [Taint("k", "a"), Taint("k", "b", "NoExecute")],
     "taint 'k': one tag per taint key"),
])
def test_names_the_tags_cannot_carry_are_refused(resources, labels, taints, error):
    with pytest.raises(autoscaler.TagError) as e:
        autoscaler.template_tags(resources, labels, taints)
    assert str(e.value) == error


def test_generated_helm_values_golden(platform):
    assert helm.generated_values(platform) == {
        # the images in the spec's registry, tagged with this version (spec.images)
        "hub": {"image": {"name": "jupyterhubgpu.azurecr.io/jupyterhub-gpu-hub",
                          "tag": VERSION},
                "allowNamedServers": True, "config": {"OAuthenticator": {
            "manage_groups": True,
            "allowed_groups": ["data-science", "experimentation", "ml-eng"]}}},
        # a100-mig-3g: 20m patience + a100mig's 15m boot + 5m start + 1m margin
        "singleuser": {"startTimeout": 2460, "image": {
            "name": "jupyterhubgpu.azurecr.io/jupyterhub-gpu-notebook", "tag": VERSION}},
        # a new node pulls the notebook image while its driver installs (bundle.helm)
        "prePuller": {"continuous": {"enabled": True}, "extraTolerations": [
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
             "effect": "NoSchedule"},
            {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal",
             "value": "spot", "effect": "NoSchedule"},
            {"key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user",
             "effect": "NoSchedule"}],
            "extraImages": {"notebook-0": {
                "name": "jupyterhubgpu.azurecr.io/jupyterhub-gpu-notebook",
                "tag": VERSION}}},
        "scheduling": {"userScheduler": {"pluginConfig": [{
            "name": "NodeResourcesFit",
            "args": {"scoringStrategy": {"type": "MostAllocated", "resources": [
                {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                {"name": "nvidia.com/gpu", "weight": 10}]}}}]}},
    }


def test_every_profile_image_is_pre_pulled_on_every_pool(example_spec):
    example_spec["profiles"][0]["image"] = "registry.example:5000/lab"  # no tag
    platform = parse_platform(example_spec)
    pulled = helm.notebook_images(platform)
    assert {"name": "registry.example:5000/lab", "tag": "latest"} in pulled.values()
    assert len(pulled) == 2
    tolerated = {t["key"] for t in helm.pool_tolerations(platform)}
    assert tolerated == {t.key for p in platform.pools for t in p.taints}


def test_start_timeout_is_the_longest_wait(example_spec):
    example_spec["profiles"][0]["queuePatience"] = "1h"
    example_spec["profiles"][0]["startTimeout"] = "10m"
    # t4-shared: 1h patience + t4dev's 10m boot + 10m start + 1m margin
    assert helm.start_timeout(parse_platform(example_spec)) == 4860


def test_the_hub_waits_for_a_new_node_of_the_profiles_slowest_pool(example_spec):
    """The spawner's start_timeout (boot.spawn_patience) holds the queue patience, a new
    node of the profile's slowest pool and its startTimeout: the hub never gives up on
    a server Kueue's waitForPodsReady still lets start."""
    example_spec["pools"][3]["bootTime"] = "25m"  # a100, the training profile's fallback
    platform = parse_platform(example_spec)
    training = platform.profile("a100-training")  # pools a100spot (10m), a100 (25m)
    assert boot.spawn_patience(platform, training) == 600 + 25 * 60 + 300 + 60
    assert boot.spawn_patience(platform, platform.profile("cpu")) == 600 + 300 + 300 + 60
    timeout = kueueconfig.pods_ready_timeout(platform)
    assert all(boot.ready_window(platform, p) <= timeout for p in platform.profiles)


def test_callers_get_fresh_objects(platform):
    objs = namespaces.team_objects(platform)
    for obj in objs:
        for rule in obj.get("rules", []):
            rule["verbs"].append("patch")
    assert "patch" not in namespaces.HUB_RULES[0]["verbs"]
    assert "patch" not in namespaces.HUB_CLUSTER_RULES[0]["verbs"]
    assert yaml.safe_dump(namespaces.team_objects(platform)) == yaml.safe_dump(
        namespaces.team_objects(platform))


def test_the_user_scheduler_gets_what_its_minor_watches_beyond_the_charts_role(platform):
    """z2jh 4.4.0's user-scheduler ClusterRole is the 1.30 system:kube-scheduler role
    (templates/scheduling/user-scheduler/rbac.yaml); kube-scheduler 1.35 also watches
    volume attachments and Dynamic Resource Allocation's objects (kubernetes v1.35
    plugin/pkg/auth/authorizer/rbac/bootstrappolicy/testdata/cluster-roles.yaml), and
    the bundle grants exactly those to the user-scheduler's ServiceAccount."""
    from tests.z2jh_chart import REFERENCE

    from jupyterhub_gpu.bundle import userscheduler

    objects = namespaces.team_objects(platform)
    role, binding = (o for o in objects if o["metadata"]["name"]
                     == "jupyterhub-gpu-user-scheduler-jupyterhub")
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"]}
    assert {("storage.k8s.io", "volumeattachments"), ("resource.k8s.io", "resourceclaims"),
            ("resource.k8s.io", "resourceslices"), ("resource.k8s.io", "deviceclasses")} <= granted
    assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": "jupyterhub",
                                    "name": userscheduler.SERVICE_ACCOUNT}]
    rbac = REFERENCE / "chart/jupyterhub/templates/scheduling/user-scheduler/rbac.yaml"
    if not rbac.is_file():
        pytest.skip(f"z2jh reference chart not found at {REFERENCE}")
    chart_role = rbac.read_text()
    assert all(r not in chart_role for _, r in granted if r != "pods/finalizers")
