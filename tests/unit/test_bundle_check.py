"""``jupyterhub-gpu check-bundle``: passes on the committed bundle, and each kind of
drift between a file and the spec is reported naming the file, object and field."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import yaml

from jupyterhub_gpu.bundle.files import GENERATED

CLI = [sys.executable, "-m", "jupyterhub_gpu.cli", "check-bundle"]
BUNDLE = ["config/platform.yaml", "config/kueue.yaml", "config/device-plugin.yaml",
          "config/kueue-configuration.yaml", "config/team-namespaces.yaml",
          "config/gpu-operator-values.yaml", "config/node-auto-provisioning.yaml",
          "config/prometheus-rules.yaml", "config/service-monitors.yaml",
          "config/grafana-dashboard.json",
          "config/terraform", "helm-values"]
GENERATED_PATHS = {path for path, _ in GENERATED.values()}
TAG = "k8s.io_cluster-autoscaler_node-template_"
OWNER = ("the GPU Operator's MIG manager owns the MIG layout (nvidia.com/mig.config); "
         "AKS must not partition too")


@pytest.fixture
def bundle(repo_root, tmp_path) -> Path:
    """A copy of the committed bundle, laid out as in the repository."""
    for rel in BUNDLE:
        src, dst = repo_root / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".terraform*"))
        else:
            shutil.copy(src, dst)
    return tmp_path


def check(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=root)


def edit_yaml(rel: str, change: Callable[[list], None]) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / rel
        docs = list(yaml.safe_load_all(path.read_text()))
        change(docs)
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return apply


def edit_json(rel: str, change: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / rel
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
    return apply


def replace_text(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / rel
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new))
    return apply


def find(docs: list, kind: str, name: str) -> dict:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def _drop_local_queue(docs):
    docs.remove(find(docs, "LocalQueue", "ml-eng"))


def _add_default_queue(docs):
    docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                 "metadata": {"name": "default", "namespace": "jupyterhub"},
                 "spec": {"clusterQueue": "ml-eng"}})


def _quota(docs):
    cq = find(docs, "ClusterQueue", "ml-eng")
    flavor = next(f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "a100mig")
    next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")["nominalQuota"] = "6"


def _flavor_taint(docs):
    find(docs, "ResourceFlavor", "a100spot")["spec"]["nodeTaints"].pop()


def _rename_resource(docs):
    docs[0]["data"]["timeslicing-4"] = docs[0]["data"]["timeslicing-4"].replace(
        "renameByDefault: false", "renameByDefault: true")


def _mixed_mig(docs):
    docs[0]["data"]["mig-single"] = docs[0]["data"]["mig-single"].replace(
        "migStrategy: single", "migStrategy: mixed")


def _unlabel_namespace(docs):
    del find(docs, "Namespace", "jhub-ml-eng")["metadata"]["labels"]["jupyterhub-gpu/managed"]


def _unscore_shared(docs):
    fit = docs[0]["scheduling"]["userScheduler"]["pluginConfig"][0]
    resources = fit["args"]["scoringStrategy"]["resources"]
    resources[:] = [r for r in resources if r["name"] != "nvidia.com/gpu"]


def _fair_share_weight(docs):
    find(docs, "ClusterQueue", "ml-eng")["spec"]["fairSharing"] = {"weight": "40"}


def _fair_sharing_on(docs):
    docs[0]["fairSharing"] = {"preemptionStrategies": ["LessThanInitialShare"]}


def _role_verbs(docs):
    role = next(d for d in docs if d["kind"] == "Role"
                and d["metadata"]["namespace"] == "jhub-experimentation")
    role["rules"][2]["verbs"] = ["get"]


def _no_job_create(docs):
    role = next(d for d in docs if d["kind"] == "Role"
                and d["metadata"]["namespace"] == "jhub-ml-eng")
    rule = next(r for r in role["rules"] if r["apiGroups"] == ["batch"])
    rule["verbs"].remove("create")


def _no_cluster_role(docs):
    docs[:] = [d for d in docs if d["kind"] != "ClusterRole"]


DRIFTS = {
    "a taint changed in the tfvars": (
        edit_json("config/terraform/pools.auto.tfvars.json", lambda d: d["gpu_pools"]["a100spot"][
            "node_taints"].__setitem__(1, "kubernetes.azure.com/scalesetpriority=spot:PreferNoSchedule")),
        'config/terraform/pools.auto.tfvars.json: gpu_pools["a100spot"]: node_taints: expected '
        "['nvidia.com/gpu=present:NoSchedule', 'kubernetes.azure.com/scalesetpriority=spot:"
        "NoSchedule'], found ['nvidia.com/gpu=present:NoSchedule', "
        "'kubernetes.azure.com/scalesetpriority=spot:PreferNoSchedule']"),
    # cluster-autoscaler's skip-nodes-with-system-pods (on, main.tf): a coredns or
    # metrics-server replica on an untainted CPU node keeps it up for good
    "the CPU pool left untainted": (
        edit_json("config/terraform/pools.auto.tfvars.json",
                  lambda d: d["gpu_pools"]["cpu"].__setitem__("node_taints", [])),
        'config/terraform/pools.auto.tfvars.json: gpu_pools["cpu"]: node_taints: expected '
        "['hub.jupyter.org/dedicated=user:NoSchedule'], found [] (every pool is tainted: a "
        "kube-system pod on an untainted node keeps it from scaling down "
        "(skip_nodes_with_system_pods))"),
    "a wrong label in the tfvars": (
        edit_json("config/terraform/pools.auto.tfvars.json", lambda d: d["gpu_pools"]["t4dev"][
            "node_labels"].__setitem__("nvidia.com/device-plugin.config", "timeslicing-8")),
        'config/terraform/pools.auto.tfvars.json: gpu_pools["t4dev"]: node_labels.nvidia.com/'
        "device-plugin.config: expected 'timeslicing-4', found 'timeslicing-8'"),
    "a pool missing from the tfvars": (
        edit_json("config/terraform/pools.auto.tfvars.json",
                  lambda d: d["gpu_pools"].pop("a100mig")),
        'config/terraform/pools.auto.tfvars.json: gpu_pools["a100mig"]: (pool): expected '
        "'present', found 'missing' (the spec has this pool)"),
    "a node pool attribute not wired from the tfvars": (
        replace_text("config/terraform/main.tf", "node_taints           = each.value.node_taints",
                     'node_taints           = ["nvidia.com/gpu=present:NoSchedule"]'),
        'config/terraform: resource "azurerm_kubernetes_cluster_node_pool": node_taints: '
        "expected 'each.value.node_taints', found '[\"nvidia.com/gpu=present:NoSchedule\"]'"),
    "a scale-from-zero resource tag dropped": (
        edit_json("config/terraform/pools.auto.tfvars.json", lambda d: d["gpu_pools"]["t4dev"][
            "autoscaler_tags"].pop(f"{TAG}resources_nvidia.com_gpu")),
        f'config/terraform/pools.auto.tfvars.json: gpu_pools["t4dev"]: autoscaler_tags.'
        f"{TAG}resources_nvidia.com_gpu: expected '4', found <missing>"),
    "the autoscaler tags not on the node pool": (
        replace_text("config/terraform/main.tf",
                     "tags                  = merge(var.tags, each.value.autoscaler_tags)",
                     "tags                  = var.tags"),
        'config/terraform: resource "azurerm_kubernetes_cluster_node_pool": tags: expected '
        "'merge(var.tags, each.value.autoscaler_tags)', found 'var.tags'"),
    "AKS installs its GPU driver": (
        replace_text("config/terraform/main.tf",
                     'gpu_driver            = each.value.gpu ? "None" : null',
                     'gpu_driver            = each.value.gpu ? "Install" : null'),
        'config/terraform: resource "azurerm_kubernetes_cluster_node_pool": gpu_driver: '
        """expected 'each.value.gpu ? "None" : null', found """
        """'each.value.gpu ? "Install" : null'"""),
    "AKS partitions MIG as well": (
        replace_text("config/terraform/main.tf",
                     'gpu_driver            = each.value.gpu ? "None" : null',
                     'gpu_driver            = each.value.gpu ? "None" : null\n'
                     '  gpu_instance          = "MIG3g"'),
        'config/terraform: resource "azurerm_kubernetes_cluster_node_pool": gpu_instance: '
        f"""expected <missing>, found '"MIG3g"' ({OWNER})"""),
    "a MIG instance profile in the tfvars": (
        edit_json("config/terraform/pools.auto.tfvars.json",
                  lambda d: d["gpu_pools"]["a100mig"].__setitem__("gpu_instance", "MIG3g")),
        'config/terraform/pools.auto.tfvars.json: gpu_pools["a100mig"]: gpu_instance: '
        f"expected <missing>, found 'MIG3g' ({OWNER})"),
    "a global MIG strategy for the device plugin": (
        replace_text("config/gpu-operator-values.yaml", "strategy: ''", "strategy: mixed"),
        "config/gpu-operator-values.yaml: GPU Operator values: mig.strategy: expected '', "
        "found 'mixed' (a global MIG_STRATEGY overrides the per-node device-plugin configs)"),
    "the operator's driver off": (
        replace_text("config/gpu-operator-values.yaml", "driver:\n  enabled: true",
                     "driver:\n  enabled: false"),
        "config/gpu-operator-values.yaml: GPU Operator values: driver.enabled: expected "
        """True, found False (AKS installs no driver (gpu_driver = "None"): the operator """
        "must)"),
    "the MIG manager without reboots": (
        replace_text("config/gpu-operator-values.yaml", "value: 'true'", "value: 'false'"),
        "config/gpu-operator-values.yaml: GPU Operator values: migManager.env[WITH_REBOOT]."
        "value: expected 'true', found 'false' (an A100 on Azure changes MIG mode only "
        "with a VM reboot)"),
    "a GPU pool's max_pods other than the reservations assume": (
        replace_text("config/terraform/main.tf", "max_pods              = 110",
                     "max_pods              = 250"),
        'config/terraform: resource "azurerm_kubernetes_cluster_node_pool": max_pods: '
        "expected '110', found '250' (AKS's kube-reserved memory grows with max_pods; "
        "validate and the Kueue quotas count allocatable for this many)"),
    "the system pool scaled whatever the spec": (
        replace_text("config/terraform/main.tf",
                     "auto_scaling_enabled = var.cluster_autoscaler != null",
                     "auto_scaling_enabled = true"),
        'config/terraform: resource "azurerm_kubernetes_cluster": default_node_pool.'
        "auto_scaling_enabled: expected 'var.cluster_autoscaler != null', found 'true' (the "
        "system pool has a fixed size when no pool uses the cluster autoscaler)"),
    "a scale-down time written into main.tf": (
        replace_text("config/terraform/main.tf",
                     "scale_down_unneeded = auto_scaler_profile.value.scale_down_unneeded",
                     'scale_down_unneeded = "10m"'),
        'config/terraform: resource "azurerm_kubernetes_cluster": dynamic "auto_scaler_profile"'
        ".content.scale_down_unneeded: expected 'auto_scaler_profile.value.scale_down_unneeded',"
        """ found '"10m"' (scale_down_unneeded comes from the pools' consolidateAfter)"""),
    "AKS's cluster-wide scale-down pause after a scale-up": (
        replace_text("config/terraform/main.tf", 'scale_down_delay_after_add = "1m"',
                     'scale_down_delay_after_add = "10m"'),
        'config/terraform: resource "azurerm_kubernetes_cluster": dynamic "auto_scaler_profile"'
        """.content.scale_down_delay_after_add: expected '"1m"', found '"10m"' (the pause after """
        "a scale-up is cluster-wide (cluster-autoscaler's isScaleDownInCooldown): any pool's "
        "scale-up would keep every idle GPU node up)"),
    # a GPU node counts as unready until it advertises nvidia.com/gpu (kubernetes/
    # autoscaler, processors/customresources/gpu_processor.go): AKS's 15m is shorter
    # than a MIG node's driver install, reboot and margin
    "AKS's default node provisioning time kept in main.tf": (
        replace_text("config/terraform/main.tf", "max_node_provisioning_time = "
                     "auto_scaler_profile.value.max_node_provisioning_time",
                     'max_node_provisioning_time = "15m"'),
        'config/terraform: resource "azurerm_kubernetes_cluster": dynamic "auto_scaler_profile"'
        ".content.max_node_provisioning_time: expected 'auto_scaler_profile.value."
        """max_node_provisioning_time', found '"15m"' (a GPU node is not ready before its """
        "driver (and a MIG node's reboot): the autoscaler must wait for the slowest pool's "
        "bootTime)"),
    # Kueue's waitForPodsReady is one timeout for all workloads (Kueue's Configuration,
    # apis/config/v1beta2 WaitForPodsReady): the example's old 11m is below the MIG
    # pool's 15m bootTime alone
    "Kueue's ready timeout below the slowest pool's boot": (
        edit_yaml("config/kueue-configuration.yaml",
                  lambda d: d[0]["waitForPodsReady"].update(timeout="11m")),
        "config/kueue-configuration.yaml: Configuration: waitForPodsReady.timeout: expected "
        "'21m', found '11m' (one timeout for every workload: it must cover pool 'a100mig''s "
        "bootTime 15m plus the longest startTimeout, or Kueue deletes notebooks still "
        "starting on a new node)"),
    "Node Auto Provisioning never switched on": (
        replace_text("config/terraform/main.tf",
                     'mode               = var.node_auto_provisioning ? "Auto" : "Manual"',
                     'mode               = "Manual"'),
        'config/terraform: resource "azurerm_kubernetes_cluster": node_provisioning_profile.mode:'
        """ expected 'var.node_auto_provisioning ? "Auto" : "Manual"', found '"Manual"' (Node """
        "Auto Provisioning is on when a pool uses it)"),
    "a scale-down time changed in the tfvars": (
        edit_json("config/terraform/pools.auto.tfvars.json",
                  lambda d: d["cluster_autoscaler"].__setitem__("scale_down_unneeded", "30m")),
        "config/terraform/pools.auto.tfvars.json: variables: cluster_autoscaler."
        "scale_down_unneeded: expected '10m', found '30m'"),
    "a NodePool the spec does not have": (
        replace_text("config/node-auto-provisioning.yaml", "nothing to apply.\n",
                     "nothing to apply.\napiVersion: karpenter.sh/v1\nkind: NodePool\n"
                     "metadata: {name: a100spot}\n"),
        "config/node-auto-provisioning.yaml: NodePool a100spot: (object): expected 'absent', "
        "found 'present' (the spec has no such object)"),
    "a queue missing in kueue.yaml": (
        edit_yaml("config/kueue.yaml", _drop_local_queue),
        "config/kueue.yaml: LocalQueue jhub-ml-eng/ml-eng: (object): expected 'present', "
        "found 'missing'"),
    "a queue the spec does not have": (
        edit_yaml("config/kueue.yaml", _add_default_queue),
        "config/kueue.yaml: LocalQueue jupyterhub/default: (object): expected 'absent', "
        "found 'present' (the spec has no such object)"),
    "a quota changed in kueue.yaml": (
        edit_yaml("config/kueue.yaml", _quota),
        "config/kueue.yaml: ClusterQueue ml-eng: spec.resourceGroups[0].flavors[a100mig]."
        "resources[nvidia.com/gpu].nominalQuota: expected '5', found '6'"),
    "a taint missing from a ResourceFlavor": (
        edit_yaml("config/kueue.yaml", _flavor_taint),
        "config/kueue.yaml: ResourceFlavor a100spot: spec.nodeTaints: expected"),
    # kubernetes/autoscaler: GpuCustomResourcesProcessor (cluster-autoscaler/processors/
    # customresources/gpu_processor.go) counts a node with AKS's GPU label and no
    # allocatable nvidia.com/gpu unready; past ok-total-unready-count and
    # max-total-unready-percentage, IsClusterHealthy (clusterstate/clusterstate.go) is
    # false and all scaling stops
    "a renamed resource in the device-plugin config": (
        edit_yaml("config/device-plugin.yaml", _rename_resource),
        "config/device-plugin.yaml: ConfigMap jupyterhub-gpu-device-plugin key "
        "'timeslicing-4': resource advertised on pool 't4dev': expected "
        "'nvidia.com/gpu', found 'nvidia.com/gpu.shared' (the pool's nodes would lack "
        "nvidia.com/gpu: the cluster autoscaler counts a GPU node (AKS labels it "
        "kubernetes.azure.com/accelerator) without allocatable nvidia.com/gpu as unready"),
    "the mixed MIG strategy in the device-plugin config": (
        edit_yaml("config/device-plugin.yaml", _mixed_mig),
        "config/device-plugin.yaml: ConfigMap jupyterhub-gpu-device-plugin key "
        "'mig-single': resource advertised on pool 'a100mig': expected 'nvidia.com/gpu', "
        "found 'nvidia.com/mig-3g.40gb' (the pool's nodes would lack nvidia.com/gpu: the "
        "cluster autoscaler counts a GPU node"),
    "a framework added to Kueue's Configuration": (
        edit_yaml("config/kueue-configuration.yaml",
                  lambda d: d[0]["integrations"]["frameworks"].append("jobset.x-k8s.io/jobset")),
        "config/kueue-configuration.yaml: Configuration: integrations.frameworks: "
        "expected ['pod', 'batch/job'], found ['pod', 'batch/job', 'jobset.x-k8s.io/jobset']"),
    "a fair-sharing weight under classical preemption": (
        edit_yaml("config/kueue.yaml", _fair_share_weight),
        "config/kueue.yaml: ClusterQueue ml-eng: spec.fairSharing: expected <missing>, found "
        "{'weight': '40'} (a fair-sharing weight; Kueue reads it only with fair sharing on; "
        "Kueue runs classical preemption)"),
    "fair sharing turned on under ClusterQueues built for classical preemption": (
        edit_yaml("config/kueue-configuration.yaml", _fair_sharing_on),
        "config/kueue.yaml: ClusterQueue ml-eng: spec.preemption.borrowWithinCohort: expected "
        "<missing>, found {'policy': 'LowerPriority', 'maxPriorityThreshold': 100} (Kueue "
        "documents borrowWithinCohort as valid only with classical preemption, not with fair "
        "sharing; Kueue runs fair sharing)"),
    "a team namespace without Kueue's label": (
        edit_yaml("config/team-namespaces.yaml", _unlabel_namespace),
        "config/team-namespaces.yaml: Namespace jhub-ml-eng: metadata.labels."
        "jupyterhub-gpu/managed: expected 'true', found <missing> (Kueue's "
        "managedJobsNamespaceSelector would not manage its pods)"),
    "the hub's Role cut short": (
        edit_yaml("config/team-namespaces.yaml", _role_verbs),
        "config/team-namespaces.yaml: Role jhub-experimentation/jupyterhub-gpu-hub: "
        "rules[2].verbs: expected ['get', 'list', 'watch'], found ['get']"),
    "the hub may not create training jobs": (
        edit_yaml("config/team-namespaces.yaml", _no_job_create),
        "config/team-namespaces.yaml: Role jhub-ml-eng/jupyterhub-gpu-hub: rules[5].verbs: "
        "expected ['get', 'list', 'watch', 'create', 'delete'], found ['get', 'list', "
        "'watch', 'delete']"),
    "the hub's ClusterRole left out": (
        edit_yaml("config/team-namespaces.yaml", _no_cluster_role),
        "config/team-namespaces.yaml: ClusterRole jupyterhub-gpu-hub-jupyterhub: (object): "
        "expected 'present', found 'missing' (the hub's one node watch needs get, list and "
        "watch on nodes; without them /hub/metrics lacks jupyterhub_gpu_pool_nodes)"),
    "a start timeout shorter than the queue patience": (
        replace_text("helm-values/generated.yaml", "startTimeout: 2460", "startTimeout: 1500"),
        "helm-values/generated.yaml: z2jh values: singleuser.startTimeout: expected "
        "'>= 2460', found 1500"),
    "the continuous image puller kept off the GPU nodes": (
        replace_text("helm-values/generated.yaml", "  continuous:\n    enabled: true",
                     "  continuous:\n    enabled: false"),
        "helm-values/generated.yaml: z2jh values: prePuller.continuous.enabled: expected "
        "True, found False (the notebook image is pulled onto a new node while its GPU "
        "driver installs only if the continuous image puller runs there)"),
    # Kubernetes' version skew policy: a kube-scheduler at most one minor older than
    # the API server; z2jh 4.4.0's default is v1.30.14
    "the chart's own kube-scheduler under a pinned 1.35 cluster": (
        replace_text("helm-values/values.yaml", 'tag: "v1.35.4"', 'tag: "v1.30.14"'),
        "helm-values/values.yaml: z2jh values: scheduling.userScheduler.image.tag: expected "
        "'v1.35.<patch>', found 'v1.30.14' (the user-scheduler is a kube-scheduler: "
        "Kubernetes' version skew policy wants it on the API server's minor (at most one "
        "older), and its RBAC is the pinned minor's)"),
    "the cluster's minor left to AKS": (
        replace_text("config/terraform/variables.tf", 'default     = "1.35"',
                     "default     = null"),
        'config/terraform: variable "kubernetes_version": default: expected \'a minor such as '
        "1.35', found 'null' (the user-scheduler is a kube-scheduler"),
    # the registry is named once, in the spec: what derives from it must follow it
    "the spec's registry changed without regenerating": (
        replace_text("config/platform.yaml", "registry: jupyterhubgpu", "registry: ourlab2"),
        "config/terraform/pools.auto.tfvars.json: variables: acr_name: expected 'ourlab2', "
        "found 'jupyterhubgpu'"),
    "the hub image from another registry than the spec's": (
        replace_text("helm-values/generated.yaml",
                     "name: jupyterhubgpu.azurecr.io/jupyterhub-gpu-hub",
                     "name: otherregistry.azurecr.io/jupyterhub-gpu-hub"),
        "helm-values/generated.yaml: z2jh values: hub.image.name: expected "
        "'jupyterhubgpu.azurecr.io/jupyterhub-gpu-hub', found "
        "'otherregistry.azurecr.io/jupyterhub-gpu-hub' (the spec's registry names the "
        "registry once; the hub image is there)"),
    "user placeholders on": (
        replace_text("helm-values/values.yaml", "enabled: false\n    replicas: 0",
                     "enabled: true\n    replicas: 0"),
        "helm-values/values.yaml: z2jh values: scheduling.userPlaceholder.enabled: expected "
        "False, found True (placeholder pods keep nodes up)"),
    "the spec not mounted where configure_hub reads it": (
        replace_text("helm-values/values.yaml", "mountPath: /etc/jupyterhub-gpu",
                     "mountPath: /etc/platform"),
        "helm-values/values.yaml: z2jh values: hub.extraVolumeMounts: expected 'a ConfigMap "
        "volume at /etc/jupyterhub-gpu', found ['/etc/platform']"),
    "user pods required onto a user pool": (
        replace_text("helm-values/values.yaml", "  nodeSelector: {}",
                     "  nodeSelector:\n    hub.jupyter.org/node-purpose: user"),
        "helm-values/values.yaml: z2jh values: singleuser.nodeSelector.hub.jupyter.org/"
        "node-purpose: expected <missing>, found 'user'"),
    "a GPU resource the user-scheduler does not pack": (
        edit_yaml("helm-values/generated.yaml", _unscore_shared),
        "helm-values/generated.yaml: z2jh values: scheduling.userScheduler.pluginConfig: "
        "expected \"scores ['nvidia.com/gpu']\""),
    "a team's group not allowed to log in": (
        replace_text("helm-values/generated.yaml", "      - ml-eng\n", ""),
        "helm-values/generated.yaml: z2jh values: hub.config.OAuthenticator.allowed_groups: "
        "expected \"to include ['ml-eng']\", found ['data-science', 'experimentation']"),
    "team namespaces shut out of the hub": (
        replace_text("helm-values/values.yaml", "jupyterhub-gpu/managed: \"true\"",
                     "jupyterhub-gpu/team: \"x\""),
        "helm-values/values.yaml: z2jh values: hub.networkPolicy.ingress: expected "
        "'from namespaces labelled jupyterhub-gpu/managed=true on port 8081'"),
    "the chart's culler on beside ours": (
        replace_text("helm-values/values.yaml", "cull:\n  enabled: false", "cull:\n  enabled: true"),
        "helm-values/values.yaml: z2jh values: cull.enabled: expected False, found True (two "
        "cullers: the chart's would stop servers after its own cull.timeout, whatever their "
        "profile's idleTimeout or maxAge)"),
    "the chart's consecutiveFailureLimit back": (
        replace_text("helm-values/values.yaml", "  consecutiveFailureLimit: 0\n", ""),
        "helm-values/values.yaml: z2jh values: hub.consecutiveFailureLimit: expected 0, "
        "found \"5 (the chart's default)\" (queue-patience timeouts, refusals while Kueue is unavailable and "
        "waitForPodsReady deletions are failed spawns: under a busy queue the hub would exit)"),
    "homes on a ReadWriteOnce Azure Disk": (
        replace_text("helm-values/values.yaml", "azurefile-csi-premium\n      "
                     "storageAccessModes: [ReadWriteMany]",
                     "managed-csi\n      storageAccessModes: [ReadWriteOnce]"),
        "helm-values/values.yaml: z2jh values: singleuser.storage.dynamic.storageAccessModes: "
        "expected ['ReadWriteMany'], found ['ReadWriteOnce'] (a job or another server of the "
        "user on another node than the notebook's would wait in Multi-Attach error)"),
    "the chart's home access mode back": (
        replace_text("helm-values/values.yaml", "      storageAccessModes: [ReadWriteMany]\n", ""),
        "helm-values/values.yaml: z2jh values: singleuser.storage.dynamic.storageAccessModes: "
        "expected ['ReadWriteMany'], found \"['ReadWriteOnce'] (the chart's default)\""),
    "an Azure Disk home class": (
        replace_text("helm-values/values.yaml", "storageClass: azurefile-csi-premium",
                     "storageClass: managed-csi"),
        "helm-values/values.yaml: z2jh values: singleuser.storage.dynamic.storageClass: "
        "expected \"one of ['azurefile-csi', 'azurefile-csi-premium']\", found 'managed-csi'"),
    "a home per named server": (
        replace_text("helm-values/values.yaml", "pvcNameTemplate: claim-{username}",
                     "pvcNameTemplate: claim-{username}--{servername}"),
        "helm-values/values.yaml: z2jh values: singleuser.storage.dynamic.pvcNameTemplate: "
        "expected 'claim-{username}', found 'claim-{username}--{servername}' (a claim per "
        "server: each named server gets an empty home of its own, and deleting it leaves "
        "its disk on KubeSpawner 7.0.0 or 7.1)"),
    "KubeSpawner's per-server home name back": (
        replace_text("helm-values/values.yaml", "      pvcNameTemplate: claim-{username}\n", ""),
        "helm-values/values.yaml: z2jh values: singleuser.storage.dynamic.pvcNameTemplate: "
        "expected 'claim-{username}', found \"claim-{user_server} (KubeSpawner's default)\""),
    "the hub's metrics token renamed": (
        replace_text("config/service-monitors.yaml", "hub.services.prometheus.apiToken",
                     "hub.services.prom.apiToken"),
        "config/service-monitors.yaml: ServiceMonitor jupyterhub/jupyterhub-gpu-hub: "
        "spec.endpoints[0].authorization.credentials.key: expected "
        "'hub.services.prometheus.apiToken', found 'hub.services.prom.apiToken'"),
    "a Prometheus URL that is not kube-prometheus-stack's": (
        replace_text("helm-values/values.yaml",
                     "http://kube-prometheus-stack-prometheus.monitoring.svc.cluster.local:9090",
                     "http://prometheus-server.monitoring.svc.cluster.local"),
        "helm-values/values.yaml: z2jh values: hub.extraEnv.JUPYTERHUB_GPU_PROMETHEUS_URL: "
        "expected 'http://kube-prometheus-stack-prometheus.monitoring.svc.cluster.local:9090', "
        "found 'http://prometheus-server.monitoring.svc.cluster.local' (kube-prometheus-stack, "
        "installed as release kube-prometheus-stack in namespace monitoring "
        "(docs/admin-guide.md, step 6), serves its Prometheus there; elsewhere the "
        "culler's GPU-idle rule goes without GPU data)"),
    "the notebooks' Prometheus URL on another port": (
        replace_text("helm-values/values.yaml",
                     "JUPYTERHUB_GPU_PROMETHEUS_URL: *prometheus-url",
                     "JUPYTERHUB_GPU_PROMETHEUS_URL: http://kube-prometheus-stack-prometheus"
                     ".monitoring:8080"),
        "helm-values/values.yaml: z2jh values: singleuser.extraEnv.JUPYTERHUB_GPU_PROMETHEUS_URL: "
        "expected 'http://kube-prometheus-stack-prometheus.monitoring.svc.cluster.local:9090', "
        "found 'http://kube-prometheus-stack-prometheus.monitoring:8080'"),
    "a missing file": (
        lambda root: (root / "config/kueue-configuration.yaml").unlink(),
        "config/kueue-configuration.yaml: (file): (file): expected 'readable', "
        "found 'No such file or directory'"),
}


def test_committed_bundle_passes(repo_root):
    result = check(repo_root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ("check-bundle: OK: 13 file(s) agree with config/platform.yaml "
                             "(5 pools, 3 teams, 5 profiles)\n")


@pytest.mark.parametrize("case", list(DRIFTS))
def test_drift_is_caught(bundle, case):
    mutate, message = DRIFTS[case]
    assert check(bundle).returncode == 0
    mutate(bundle)
    result = check(bundle)
    assert result.returncode == 1, result.stdout
    assert result.stdout.startswith("check-bundle: ")
    assert "difference(s) between config/platform.yaml and the bundle" in result.stdout
    assert f"  - {message}" in result.stdout, result.stdout
    # what fixes it (tests/unit/test_bundle_fix.py runs the command and proves it does)
    file = message.split(": ")[0]
    if file in GENERATED_PATHS:
        assert "\n  jupyterhub-gpu bundle config/platform.yaml --write\n" in result.stdout
    else:
        assert result.stdout.endswith(
            f"No generated file differs from what the spec gives: edit {file} as each "
            "difference says, or change the spec.\n"), result.stdout


def test_the_prometheus_url_may_take_any_form_of_the_services_name_or_be_given(bundle):
    """The short forms of a Service's DNS name reach it too; another Prometheus (an
    authorization proxy in front of Azure Managed Prometheus, say) is checked against
    the URL the admin gives."""
    kps = "http://kube-prometheus-stack-prometheus.monitoring.svc.cluster.local:9090"
    short = "http://kube-prometheus-stack-prometheus.monitoring:9090/"
    replace_text("helm-values/values.yaml", kps, short)(bundle)
    assert check(bundle).returncode == 0
    proxy = "http://azure-prometheus-proxy.monitoring.svc.cluster.local:8081"
    replace_text("helm-values/values.yaml", short, proxy)(bundle)
    assert check(bundle).returncode == 1
    assert check(bundle, "--prometheus-url", proxy).returncode == 0
    result = check(bundle, "--prometheus-url", "http://azure-prometheus-proxy.monitoring:8082")
    assert ("  - helm-values/values.yaml: z2jh values: singleuser.extraEnv."
            "JUPYTERHUB_GPU_PROMETHEUS_URL: expected 'http://azure-prometheus-proxy.monitoring"
            f":8082', found '{proxy}' (the Prometheus URL given to check-bundle; elsewhere "
            "the JupyterLab status item goes without GPU data)") in result.stdout


def test_only_the_files_given_are_checked(bundle):
    (bundle / "config/kueue.yaml").write_text("garbage: [")
    (bundle / "helm-values/values.yaml").write_text("garbage: [")
    result = check(bundle, "--kueue", str(bundle / "config/kueue.yaml").replace(
        "kueue.yaml", "device-plugin.yaml"), "--helm-values")
    assert result.returncode == 1
    assert "garbage" not in result.stdout and "helm-values" not in result.stdout
    assert "device-plugin.yaml: ConfigMap gpu-operator/jupyterhub-gpu-device-plugin: " \
           "(object): expected 'absent'" in result.stdout  # compared as Kueue objects


def test_unparsable_file_is_named(bundle):
    (bundle / "config/kueue.yaml").write_text("garbage: [")
    result = check(bundle)
    assert result.returncode == 1
    assert "  - config/kueue.yaml: (file): (syntax): expected 'valid YAML/JSON'" in result.stdout


def test_spec_errors_stop_the_check(bundle):
    (bundle / "config/platform.yaml").write_text("pools: 3\n")
    result = check(bundle)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error: config/platform.yaml has")
