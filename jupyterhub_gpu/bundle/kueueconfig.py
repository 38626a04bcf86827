"""Kueue's manager ``Configuration`` (``config.kueue.x-k8s.io/v1beta2``) for AKS.

It does not depend on the spec: every team namespace carries the same label
(:data:`~jupyterhub_gpu.contract.MANAGED_LABEL`), so adding a team never means
restarting Kueue.

* the ``pod`` integration (notebooks are plain pods) and ``batch/job`` (training
  jobs, :mod:`jupyterhub_gpu.builders.job`);
* ``managedJobsNamespaceSelector`` picks the team namespaces only. For pod-based
  integrations this is a strong exemption: the hub, the proxy, the user-scheduler
  and every system pod are never gated, whatever labels they carry, and a LocalQueue
  named ``default`` (which captures every unlabelled pod of its namespace) can only
  matter in a team namespace. Kueue 0.17 applies it to Jobs too (feature gate
  ``ManagedJobsNamespaceSelectorAlwaysRespected``, beta and on since 0.15): a Job
  outside the team namespaces is never suspended or queued, whatever its labels;
* ``manageJobsWithoutQueueName: false``: a pod without a queue label is not held;
* no ``fairSharing`` section: Kueue runs classical preemption, the model the
  ClusterQueues are built for (:mod:`~jupyterhub_gpu.builders.preemption`); with
  fair sharing on, their ``borrowWithinCohort`` would be ignored.

Install it with Kueue's Helm chart: ``--set-file
managerConfig.controllerManagerConfigYaml=config/kueue-configuration.yaml`` (the
chart also uses ``managedJobsNamespaceSelector`` for its pod webhooks).
"""

from __future__ import annotations

from ..builders.preemption import FAIR_SHARING_KEY
from ..contract import KUEUE_CONFIG_API_VERSION as CONFIG_API_VERSION
from ..contract import BATCH_GROUP, KUEUE_GROUP, MANAGED_LABEL

#: Kueue's integrations: notebooks' plain pods and training jobs' batch Jobs
FRAMEWORKS = ("pod", f"{BATCH_GROUP}/job")

POLICY_KEYS = ("manageJobsWithoutQueueName", "managedJobsNamespaceSelector", "integrations",
               FAIR_SHARING_KEY, "admissionFairSharing", "waitForPodsReady")
"""The keys that decide which pods Kueue manages and how it admits and preempts them
(the dev cluster runs Kueue with the shipped values of these)."""


def kueue_configuration() -> dict:
    """The manager configuration Kueue's chart puts in ``kueue-manager-config``."""
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": f"c1f6bfd2.{KUEUE_GROUP}"},
        "controller": {"groupKindConcurrency": {
            "Pod": 5, f"Job.{BATCH_GROUP}": 5, f"Workload.{KUEUE_GROUP}": 5, f"LocalQueue.{KUEUE_GROUP}": 1,
            f"ClusterQueue.{KUEUE_GROUP}": 1, f"ResourceFlavor.{KUEUE_GROUP}": 1}},
        "clientConnection": {"qps": 50, "burst": 100},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": {MANAGED_LABEL: "true"}},
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }
