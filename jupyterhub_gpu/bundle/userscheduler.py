"""z2jh's user-scheduler on the cluster's Kubernetes minor.

The user-scheduler is the official kube-scheduler binary; z2jh 4.4.0 runs
``registry.k8s.io/kube-scheduler:v1.30.14`` whatever the cluster runs, and
Kubernetes' version skew policy allows a kube-scheduler at most one minor older than
the API server. So ``helm-values/values.yaml`` sets
``scheduling.userScheduler.image.tag`` to a patch of the minor that
``config/terraform/variables.tf`` pins as ``kubernetes_version`` (AKS's
``automatic_upgrade_channel = "patch"`` keeps the minor), and ``check-bundle``
refuses the two apart
(:func:`~jupyterhub_gpu.bundle.checkhelm.check_scheduler_minor`) or the minor left to AKS
(``null``: it moves under the image).

z2jh's ClusterRole for the user-scheduler is a copy of the 1.30 ``system:kube-scheduler``
role (``templates/scheduling/user-scheduler/rbac.yaml``). A newer kube-scheduler
watches more: :data:`EXTRA_RULES` is what ``system:kube-scheduler`` of the pinned
minor grants beyond it (kubernetes ``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/
testdata/cluster-roles.yaml``: CSI volume attachments, Dynamic Resource Allocation's
device classes, claims and slices, GA and on by default since 1.34); without them its
informers are refused and it never starts scheduling. ``config/team-namespaces.yaml``
grants them to the user-scheduler's ServiceAccount (:func:`user_scheduler_rbac`).
"""

from __future__ import annotations

from ..contract import RBAC_API_VERSION, RBAC_GROUP

#: the ServiceAccount z2jh gives the user-scheduler (no ``fullnameOverride``)
SERVICE_ACCOUNT = "user-scheduler"
#: what the pinned minor's kube-scheduler needs beyond z2jh's 1.30 role
EXTRA_RULES = (
    {"apiGroups": ["storage.k8s.io"], "resources": ["volumeattachments"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["deviceclasses", "resourceslices"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "resourceclaims/status"],
     "verbs": ["get", "list", "patch", "update", "watch"]},
    {"apiGroups": [""], "resources": ["pods/finalizers"], "verbs": ["update"]},
)
TAG_PATH = "scheduling.userScheduler.image.tag"
WHY = ("the user-scheduler is a kube-scheduler: Kubernetes' version skew policy wants it "
       "on the API server's minor (at most one older), and its RBAC is the pinned minor's")


def user_scheduler_rbac(namespace: str) -> list[dict]:
    """A ClusterRole with :data:`EXTRA_RULES` and its binding to the user-scheduler of
    the release in ``namespace``."""
    name = f"jupyterhub-gpu-user-scheduler-{namespace}"
    return [{"apiVersion": RBAC_API_VERSION, "kind": "ClusterRole", "metadata": {"name": name},
             "rules": [dict(rule, verbs=list(rule["verbs"])) for rule in EXTRA_RULES]},
            {"apiVersion": RBAC_API_VERSION, "kind": "ClusterRoleBinding",
             "metadata": {"name": name},
             "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                           "namespace": namespace}],
             "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name}}]
