"""Team namespaces and what the hub may do in them, and on the cluster.

z2jh's hub Role is namespaced to the Helm release's namespace, but GPUSpawner starts
each user's pod in the namespace of the user's team. So every team namespace gets:

* the Namespace, labelled so that Kueue manages pods there (and only there) and the
  hub's NetworkPolicy lets its user servers in;
* a Role and RoleBinding for the hub's ServiceAccount: KubeSpawner's own needs
  (pods, PVCs, events -- one pod and one event reflector per namespace, no
  cluster-wide watch of them), reading Kueue Workloads, LocalQueues and the
  visibility API's pending workloads, and users' training jobs: batch Jobs and the
  headless Services of multi-pod ones, which the hub creates and deletes for them
  (:mod:`jupyterhub_gpu.builders.job`);
* NetworkPolicies (docs/network-policies.md): a default deny of every pod's ingress
  and egress; the user servers' (like the one z2jh puts in its own namespace); and
  the training-job pods' (DNS and the internet only, no ingress: the pods of one
  multi-pod job reach each other through a policy of that job's own,
  :func:`jupyterhub_gpu.builders.job.peer_policy`); and the GPU kernels' pods' (DNS
  and the internet only, no ingress: each kernel's own policies,
  :func:`jupyterhub_gpu.builders.kernel.kernel_policies`, let its owning server in);
* the checkpoint PVC named in the spec (Azure Files, ReadWriteMany).

And once for the hub, a ClusterRole and ClusterRoleBinding to read Nodes (get, list,
watch; nothing else): the hub's one node watch, which counts each pool's nodes for
its metrics (:mod:`jupyterhub_gpu.watches.poolnodes`). Nodes are cluster-scoped, so no Role
can grant it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from ..contract import (AZURE_FILES_CLASS, BATCH_GROUP, COMPONENT_LABEL, HUB_COMPONENT,
                        JOB_COMPONENT, JOBS_PORT, KERNEL_COMPONENT, KERNELS_PORT,
                        KUEUE_GROUP, KUEUE_VISIBILITY_GROUP,
                        MANAGED_LABEL, NAMESPACE_NAME_LABEL, NETWORKING_API_VERSION,
                        NETWORKING_GROUP,
                        PROXY_COMPONENT, RBAC_API_VERSION, RBAC_GROUP, SINGLEUSER_COMPONENT,
                        TEAM_LABEL)
from ..spec.model import Platform, Team
from .monitoring import KPS_NAMESPACE, PROMETHEUS_POD_LABELS, PROMETHEUS_PORT
from .userscheduler import user_scheduler_rbac

ROLE_NAME = "jupyterhub-gpu-hub"
NETWORK_POLICY_NAME = "jupyterhub-gpu-singleuser"
DEFAULT_DENY_POLICY_NAME = "jupyterhub-gpu-default-deny"
JOBS_POLICY_NAME = "jupyterhub-gpu-jobs"
KERNELS_POLICY_NAME = "jupyterhub-gpu-kernels"
#: Azure's instance metadata service: the node's managed-identity tokens
METADATA_SERVER = "169.254.169.254/32"
#: Azure's WireServer (the VM agent's channel, and the VNet's DNS)
WIRESERVER = "168.63.129.16/32"
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
DNS_PORT = 53
SINGLEUSER_PORT = 8888
HUB_PORT = 8081
HUB_PORT_NAME = "hub"  # of the z2jh hub Service (templates/hub/service.yaml)

_READ = ["get", "list", "watch"]
HUB_RULES: tuple[dict, ...] = (
    # KubeSpawner: the user's pod and home PVC (created and deleted by the hub); the
    # gpu-kernels service (jupyterhub_gpu.kernels): GPU kernels' pods, and its watch of
    # the notebook and kernel pods
    {"apiGroups": [""], "resources": ["pods", "persistentvolumeclaims"],
     "verbs": [*_READ, "create", "delete"]},
    # a fallback profile's pod: the hub records the pool Kueue admitted it to and lifts
    # its scheduling gate (jupyterhub_gpu.kueue.poolgate)
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
    # KubeSpawner's event reflector: progress messages on the spawn page
    {"apiGroups": [""], "resources": ["events"], "verbs": list(_READ)},
    # Kueue: the Workload of each queued pod and the team's LocalQueue
    {"apiGroups": [KUEUE_GROUP], "resources": ["workloads", "localqueues"],
     "verbs": list(_READ)},
    # Kueue's visibility API: a pending pod's position in its LocalQueue
    {"apiGroups": [KUEUE_VISIBILITY_GROUP],
     "resources": ["localqueues/pendingworkloads"], "verbs": list(_READ)},
    # training jobs the hub submits for its users (jupyterhub_gpu.builders.job): the
    # Job, and a multi-pod job's headless Service (its pods' rendezvous) and the
    # NetworkPolicy that lets its pods reach each other; a GPU kernel's two
    # NetworkPolicies (jupyterhub_gpu.builders.kernel.kernel_policies), owned by its pod
    {"apiGroups": [BATCH_GROUP], "resources": ["jobs"], "verbs": [*_READ, "create", "delete"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": [*_READ, "create", "delete"]},
    {"apiGroups": [NETWORKING_GROUP], "resources": ["networkpolicies"],
     "verbs": ["create", "delete"]},
    # a job's log for its user (the gpu-jobs service: jupyterhub_gpu.jobs)
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
)

#: the hub's one node watch (:mod:`jupyterhub_gpu.watches.poolnodes`)
HUB_CLUSTER_RULES: tuple[dict, ...] = (
    {"apiGroups": [""], "resources": ["nodes"], "verbs": list(_READ)},
)


@dataclass(frozen=True)
class HubRef:
    """Where z2jh runs the hub: the Helm release namespace and the hub's
    ServiceAccount (``hub`` unless ``fullnameOverride`` is set)."""

    namespace: str = "jupyterhub"
    service_account: str = "hub"


@dataclass(frozen=True)
class CheckpointVolume:
    """How the checkpoint PVC of the spec is provisioned on AKS."""

    storage_class: str = AZURE_FILES_CLASS  # built into AKS: Azure Files, RWX
    size: str = "100Gi"


#: Pod Security admission's labels on a team namespace
POD_SECURITY_PREFIX = "pod-security.kubernetes.io/"
POD_SECURITY_LEVEL = "restricted"
#: the policy version enforced, pinned so that a cluster upgrade does not change what
#: is admitted unannounced; ``warn`` and ``audit`` check the newest one
POD_SECURITY_VERSION = "v1.33"


def pod_security_labels() -> dict[str, str]:
    """Enforce Pod Security's strictest level, ``restricted``: every pod the platform
    puts in a team namespace meets it (notebooks: z2jh's uid 1000, fsGid 100 and
    allowPrivilegeEscalation false, and GPUSpawner's ``RESTRICTED_POD`` and
    ``RESTRICTED_CONTAINER``; jobs: the notebook's identity under the same; both use
    only PVC, ConfigMap, Secret, emptyDir and projected volumes). So a caller with
    the hub's credentials cannot start a privileged, root, host-namespace or
    hostPath pod there either. Warnings and audit annotations follow the latest
    version, so an upgrade's tightening shows before it is enforced."""
    labels = {}
    for mode, version in (("enforce", POD_SECURITY_VERSION), ("warn", "latest"),
                          ("audit", "latest")):
        labels[f"{POD_SECURITY_PREFIX}{mode}"] = POD_SECURITY_LEVEL
        labels[f"{POD_SECURITY_PREFIX}{mode}-version"] = version
    return labels


def namespace(team: Team) -> dict:
    """The team's namespace: Kueue manages it, and it enforces Pod Security
    ``restricted`` (:func:`pod_security_labels`)."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": team.namespace,
                         "labels": {MANAGED_LABEL: "true", TEAM_LABEL: team.name,
                                    **pod_security_labels()}}}


def hub_role(team: Team) -> dict:
    return {"apiVersion": RBAC_API_VERSION, "kind": "Role",
            "metadata": {"name": ROLE_NAME, "namespace": team.namespace},
            "rules": [dict(rule, verbs=list(rule["verbs"])) for rule in HUB_RULES]}


def hub_role_binding(team: Team, hub: HubRef) -> dict:
    return {"apiVersion": RBAC_API_VERSION, "kind": "RoleBinding",
            "metadata": {"name": ROLE_NAME, "namespace": team.namespace},
            "subjects": [{"kind": "ServiceAccount", "name": hub.service_account,
                          "namespace": hub.namespace}],
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role",
                        "name": ROLE_NAME}}


def hub_cluster_role_name(hub: HubRef) -> str:
    """One per hub (a cluster may run two releases): named by its namespace."""
    return f"{ROLE_NAME}-{hub.namespace}"


def hub_cluster_role(hub: HubRef) -> dict:
    return {"apiVersion": RBAC_API_VERSION, "kind": "ClusterRole",
            "metadata": {"name": hub_cluster_role_name(hub)},
            "rules": [dict(rule, verbs=list(rule["verbs"])) for rule in HUB_CLUSTER_RULES]}


def hub_cluster_role_binding(hub: HubRef) -> dict:
    name = hub_cluster_role_name(hub)
    return {"apiVersion": RBAC_API_VERSION, "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "subjects": [{"kind": "ServiceAccount", "name": hub.service_account,
                          "namespace": hub.namespace}],
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name}}


def _from_hub_pods(hub: HubRef, components: list[str]) -> dict:
    return {"namespaceSelector": {"matchLabels": {
                NAMESPACE_NAME_LABEL: hub.namespace}},
            "podSelector": {"matchExpressions": [
                {"key": COMPONENT_LABEL, "operator": "In", "values": components}]}}


#: egress to DNS on any address: kube-dns, or a node-local cache (z2jh's singleuser
#: defaults allow the same)
DNS_EGRESS: dict = {"ports": [{"port": DNS_PORT, "protocol": "UDP"},
                              {"port": DNS_PORT, "protocol": "TCP"}]}
#: egress to the internet: no private address (nodes, pods, the VNet), neither the
#: metadata service nor the WireServer
INTERNET_EGRESS: dict = {"to": [{"ipBlock": {
    "cidr": "0.0.0.0/0", "except": [*PRIVATE_RANGES, METADATA_SERVER, WIRESERVER]}}]}


def _policy(team: Team, name: str, selector: dict, ingress: list[dict],
            egress: list[dict]) -> dict:
    return {"apiVersion": NETWORKING_API_VERSION, "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": team.namespace},
            "spec": {"podSelector": selector, "policyTypes": ["Ingress", "Egress"],
                     "ingress": ingress, "egress": egress}}


def default_deny_policy(team: Team) -> dict:
    """Every pod of the namespace: no ingress, no egress, unless another policy
    allows it (policies only add). A pod no other policy selects is cut off."""
    return _policy(team, DEFAULT_DENY_POLICY_NAME, {}, [], [])


#: egress to kube-prometheus-stack's Prometheus (the JupyterLab status item's GPU use)
PROMETHEUS_EGRESS: dict = {
    "to": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: KPS_NAMESPACE}},
            "podSelector": {"matchLabels": dict(PROMETHEUS_POD_LABELS)}}],
    "ports": [{"port": PROMETHEUS_PORT}]}


#: the hub pod's ports a user server calls: the hub's API, the gpu-jobs service and the
#: gpu-kernels service (its GPU kernels' pods)
SERVER_HUB_PORTS = (HUB_PORT, JOBS_PORT, KERNELS_PORT)


def _server_egress(hub: HubRef) -> list[dict]:
    """Where a user server may connect: the hub pod on :data:`SERVER_HUB_PORTS`,
    Prometheus, DNS and the internet."""
    return [
        {"to": [_from_hub_pods(hub, [HUB_COMPONENT])],
         "ports": [{"port": port} for port in SERVER_HUB_PORTS]},
        copy.deepcopy(PROMETHEUS_EGRESS),
        copy.deepcopy(DNS_EGRESS), copy.deepcopy(INTERNET_EGRESS),
    ]


def network_policy(team: Team, hub: HubRef) -> dict:
    """User servers: reached only by the hub and proxy; reach the hub (its API, the
    gpu-jobs and gpu-kernels services), Prometheus (for the JupyterLab status item),
    DNS and the internet, but neither the cloud metadata service, the WireServer nor
    other private addresses (z2jh's singleuser defaults, and the WireServer)."""
    ingress = [{"from": [_from_hub_pods(hub, [HUB_COMPONENT, PROXY_COMPONENT])],
                "ports": [{"port": SINGLEUSER_PORT}]}]
    return _policy(team, NETWORK_POLICY_NAME,
                   {"matchLabels": {COMPONENT_LABEL: SINGLEUSER_COMPONENT}}, ingress,
                   _server_egress(hub))


def kernels_policy(team: Team) -> dict:
    """GPU kernels' pods (docs/kernels.md): DNS and the internet (packages, data sets,
    model hubs), as a job's pods; no ingress. Not the hub nor Prometheus: a kernel pod
    holds no JupyterHub token, and the GPU status item runs in the server. Each
    kernel's own policies (:func:`jupyterhub_gpu.builders.kernel.kernel_policies`) add
    the traffic between it and its owning server, and nothing else."""
    return _policy(team, KERNELS_POLICY_NAME,
                   {"matchLabels": {COMPONENT_LABEL: KERNEL_COMPONENT}}, [],
                   [copy.deepcopy(DNS_EGRESS), copy.deepcopy(INTERNET_EGRESS)])


def jobs_policy(team: Team) -> dict:
    """Training-job pods: reach DNS and the internet, as user servers do, but not the
    hub; nothing reaches them. The pods of one multi-pod job reach each other on
    every port through that job's own policy
    (:func:`jupyterhub_gpu.builders.job.peer_policy`)."""
    return _policy(team, JOBS_POLICY_NAME, {"matchLabels": {COMPONENT_LABEL: JOB_COMPONENT}},
                   [], [copy.deepcopy(DNS_EGRESS), copy.deepcopy(INTERNET_EGRESS)])


def checkpoint_claim(platform: Platform, team: Team, volume: CheckpointVolume) -> dict | None:
    storage = platform.checkpoint_storage
    if storage is None:
        return None
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": storage.claim_name, "namespace": team.namespace},
            "spec": {"accessModes": ["ReadWriteMany"],
                     "storageClassName": volume.storage_class,
                     "resources": {"requests": {"storage": volume.size}}}}


def team_objects(platform: Platform, hub: HubRef = HubRef(),
                 volume: CheckpointVolume = CheckpointVolume()) -> list[dict]:
    """The hub's ClusterRole and its binding, the user-scheduler's extra RBAC
    (:mod:`.userscheduler`), then everything each team namespace needs, in an order
    ``kubectl apply`` accepts."""
    objects: list[dict] = [hub_cluster_role(hub), hub_cluster_role_binding(hub),
                           *user_scheduler_rbac(hub.namespace)]
    for team in platform.teams:
        claim = checkpoint_claim(platform, team, volume)
        objects += [namespace(team), hub_role(team), hub_role_binding(team, hub),
                    default_deny_policy(team), network_policy(team, hub),
                    jobs_policy(team), kernels_policy(team),
                    *([claim] if claim else [])]
    return objects
