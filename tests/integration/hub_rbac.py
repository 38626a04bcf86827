"""The hub's Kubernetes identity in the cluster tier: bound only by the RBAC we ship.

On AKS the hub runs as the ServiceAccount ``hub`` in the Helm release's namespace,
with two sets of permissions and nothing else:

* the z2jh chart's hub Role in the release namespace (chart 4.4.0,
  ``jupyterhub/templates/hub/rbac.yaml``), reproduced by :func:`chart_hub_rbac`;
* the Roles and the ClusterRole (to read nodes) of the team-namespaces bundle, exactly as
  ``jupyterhub-gpu bundle`` renders them into ``config/team-namespaces.yaml``
  (:func:`jupyterhub_gpu.bundle.namespaces.team_objects`). ``devcluster up`` applies
  them for the default hub (:data:`HUB`); :func:`shipped_rbac` gives them for another.

:func:`install` creates such a ServiceAccount in the dev cluster with those bindings,
and :func:`token_kubeconfig` writes a kubeconfig with a token for it from the
TokenRequest API, as the kubelet mounts into the hub pod. :func:`without` removes
one verb, to prove a test fails when the shipped RBAC lacks it.
"""

from __future__ import annotations

import copy
from pathlib import Path

from jupyterhub_gpu.bundle.namespaces import HubRef, team_objects
from jupyterhub_gpu.devcluster import kueue_setup, pki
from jupyterhub_gpu.devcluster.cluster import status
from jupyterhub_gpu.devcluster.kube import AdminClient
from jupyterhub_gpu.devcluster.layout import Layout
from jupyterhub_gpu.spec.model import Platform

RBAC = "rbac.authorization.k8s.io/v1"
RBAC_KINDS = ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
CHART_HUB_ROLE = "hub"  # the chart's "jupyterhub.hub.fullname" without fullnameOverride
TOKEN_SECONDS = 24 * 3600
HUB = HubRef()  # as the chart has it: ServiceAccount "hub" in the release namespace
#: the user name the API server gives :data:`HUB`'s tokens (and the audit log records)
IDENTITY = f"system:serviceaccount:{HUB.namespace}:{HUB.service_account}"


def chart_hub_rbac(hub: HubRef) -> list[dict]:
    """The hub Role and RoleBinding z2jh 4.4.0 creates in the release namespace:
    read, create and delete pods, PVCs, secrets and services; read events."""
    read_write = ["get", "watch", "list", "create", "delete"]
    role = {"apiVersion": RBAC, "kind": "Role",
            "metadata": {"name": CHART_HUB_ROLE, "namespace": hub.namespace},
            "rules": [{"apiGroups": [""], "verbs": read_write,
                       "resources": ["pods", "persistentvolumeclaims", "secrets", "services"]},
                      {"apiGroups": [""], "resources": ["events"],
                       "verbs": ["get", "watch", "list"]}]}
    binding = {"apiVersion": RBAC, "kind": "RoleBinding",
               "metadata": {"name": CHART_HUB_ROLE, "namespace": hub.namespace},
               "subjects": [{"kind": "ServiceAccount", "name": hub.service_account,
                             "namespace": hub.namespace}],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": CHART_HUB_ROLE}}
    return [role, binding]


def shipped_rbac(platform: Platform, hub: HubRef) -> list[dict]:
    """The RBAC objects of the team-namespaces bundle for ``platform``."""
    return [obj for obj in team_objects(platform, hub) if obj["kind"] in RBAC_KINDS]


def without(objects: list[dict], resource: str, verb: str) -> list[dict]:
    """``objects`` with ``verb`` taken from every rule on ``resource``; the roles and
    bindings renamed (``<name>-without-<verb>-<resource>``) to sit beside the real ones."""
    suffix = f"-without-{verb}-{resource.replace('/', '-')}"
    changed, removed = copy.deepcopy(objects), False
    for obj in changed:
        obj["metadata"]["name"] += suffix
        if "roleRef" in obj:
            obj["roleRef"]["name"] += suffix
        for rule in obj.get("rules", []):
            if resource in rule["resources"] and verb in rule["verbs"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != verb]
                removed = True
    if not removed:
        raise ValueError(f"no rule grants {verb} on {resource}")
    return changed


def install(client: AdminClient, hub: HubRef, objects: list[dict]) -> None:
    """The hub's namespace and ServiceAccount, bound by ``objects`` only."""
    client.apply(kueue_setup.namespace(hub.namespace))
    client.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                  "metadata": {"name": hub.service_account, "namespace": hub.namespace}})
    for obj in objects:
        client.apply(obj)


def request_token(client: AdminClient, hub: HubRef) -> str:
    """A token for the hub's ServiceAccount (TokenRequest API, as the kubelet asks)."""
    from kubernetes.client import CoreV1Api

    answer = CoreV1Api(client.api_client).create_namespaced_service_account_token(
        hub.service_account, hub.namespace, {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS}})
    return answer.status.token


def token_kubeconfig(client: AdminClient, paths: pki.PkiPaths, hub: HubRef,
                     target: Path) -> Path:
    """Write a kubeconfig at ``target`` that authenticates as the hub's ServiceAccount."""
    user = (f"system:serviceaccount:{hub.namespace}:{hub.service_account}",
            {"token": request_token(client, hub)})
    return pki.write_kubeconfig(target, client.server, paths, user=user)


def admin_client(state_dir: Path) -> tuple[AdminClient, pki.PkiPaths]:
    """The dev cluster's admin client (set-up only) and its PKI."""
    paths = pki.PkiPaths(Layout(state_dir).pki_dir)
    return AdminClient(status(state_dir)["server"], paths), paths


def give_the_hub_its_identity(state_dir: Path, platform: Platform, target: Path,
                              hub: HubRef = HUB, objects: list[dict] | None = None) -> Path:
    """Install ``hub``'s ServiceAccount bound by ``objects`` (default: the chart's hub
    Role, beside the bundle's RBAC that ``devcluster up`` applied for :data:`HUB`);
    write its kubeconfig to ``target``."""
    client, paths = admin_client(state_dir)
    if objects is None:
        objects = chart_hub_rbac(hub) if hub == HUB else [*chart_hub_rbac(hub),
                                                           *shipped_rbac(platform, hub)]
    install(client, hub, objects)
    return token_kubeconfig(client, paths, hub, target)
