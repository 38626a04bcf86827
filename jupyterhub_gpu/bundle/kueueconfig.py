"""Kueue's manager ``Configuration`` (``config.kueue.x-k8s.io/v1beta2``) for AKS.

Which namespaces Kueue manages does not depend on the spec: every team namespace
carries the same label (:data:`~jupyterhub_gpu.contract.MANAGED_LABEL`), so adding a
team never means restarting Kueue. Only ``waitForPodsReady`` is derived from the
spec (:func:`wait_for_pods_ready`).

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
  fair sharing on, their ``borrowWithinCohort`` would be ignored;
* ``waitForPodsReady``: all-or-nothing admission for multi-pod jobs
  (:func:`wait_for_pods_ready`).

Install it with Kueue's Helm chart: ``--set-file
managerConfig.controllerManagerConfigYaml=config/kueue-configuration.yaml`` (the
chart also uses ``managedJobsNamespaceSelector`` for its pod webhooks).
"""

from __future__ import annotations

from ..builders.preemption import FAIR_SHARING_KEY
from ..contract import KUEUE_CONFIG_API_VERSION as CONFIG_API_VERSION
from ..contract import BATCH_GROUP, KUEUE_GROUP, MANAGED_LABEL
from ..spec.boot import READY_MARGIN_SECONDS, slowest_boot
from ..spec.quantities import format_duration
from ..spec.model import Platform

#: Kueue's integrations: notebooks' plain pods and training jobs' batch Jobs
FRAMEWORKS = ("pod", f"{BATCH_GROUP}/job")

POLICY_KEYS = ("manageJobsWithoutQueueName", "managedJobsNamespaceSelector", "integrations",
               FAIR_SHARING_KEY, "admissionFairSharing", "waitForPodsReady")
"""The keys that decide which pods Kueue manages and how it admits and preempts them
(the dev cluster runs Kueue with the shipped values of these)."""


#: requeues after a timeout before Kueue deactivates the Workload (``spec.active``)
REQUEUE_LIMIT = 3
#: the first requeue waits about this long, each next one twice as long ...
REQUEUE_BACKOFF_BASE_SECONDS = 60
#: ... up to this
REQUEUE_BACKOFF_MAX_SECONDS = 1800


def pods_ready_timeout(platform: Platform) -> int:
    """Seconds an admitted workload has to get all its pods Ready: the slowest pool's
    ``bootTime`` plus the longest profile ``startTimeout``, plus
    :data:`~jupyterhub_gpu.spec.boot.READY_MARGIN_SECONDS`.

    Kueue applies ``waitForPodsReady`` to every workload it admits, notebooks too
    (Kueue 0.17: counted from the ``Admitted`` condition; a plain pod that runs out of
    it is deleted, and a notebook server with it). The timeout is one value for all
    workloads (``WaitForPodsReady`` in Kueue's ``Configuration``,
    apis/config/v1beta2), so it must cover the slowest: an admitted notebook may wait
    for a new node of its pool (``bootTime``: on a MIG pool the driver install and the
    reboot) and then take its profile's ``startTimeout`` (the image pull and the
    server's start). So it is the longest of the profiles'
    :func:`~jupyterhub_gpu.spec.boot.ready_window` or more, and no notebook that
    starts within what the spec allows is ever evicted. Job profiles have no start
    timeout of their own: their pods get the same window.
    """
    start = max((p.start_timeout_seconds for p in platform.profiles), default=0)
    return slowest_boot(platform.pools) + start + READY_MARGIN_SECONDS


def wait_for_pods_ready(platform: Platform) -> dict:
    """Kueue's all-or-nothing admission: an admitted workload whose pods are not all
    Ready within :func:`pods_ready_timeout` (e.g. the second pod of a two-pod job finds
    no node: the pool is at ``maxNodes``, or spot capacity is gone) is evicted, its
    quota released and it is requeued, instead of holding the GPUs its running pods
    already got until ``maxRunTime``.

    * ``blockAdmission: false``: with ``true`` Kueue admits nothing anywhere while any
      admitted workload is not Ready, so every team's spawns would wait behind one
      node's boot (minutes on AKS), and pools scale up one workload at a time. The
      quota already bounds what is admitted to what the pools' nodes can hold; the
      timeout undoes the rare partial start.
    * ``recoveryTimeout``: the same window for a running job whose pod was disrupted
      (its node went away) to get its replacement Ready, on a new node if need be.
    * ``requeuingStrategy``: requeued by the eviction's time (behind what queued
      meanwhile), after a backoff of about 1, 2, 4 minutes (at most 30), and
      deactivated after :data:`REQUEUE_LIMIT` timeouts, so a job that can never start
      whole stops asking (``kubectl get workloads`` shows it inactive).
    """
    timeout = format_duration(pods_ready_timeout(platform))
    return {"timeout": timeout, "blockAdmission": False, "recoveryTimeout": timeout,
            "requeuingStrategy": {"timestamp": "Eviction",
                                  "backoffLimitCount": REQUEUE_LIMIT,
                                  "backoffBaseSeconds": REQUEUE_BACKOFF_BASE_SECONDS,
                                  "backoffMaxSeconds": REQUEUE_BACKOFF_MAX_SECONDS}}


def kueue_configuration(platform: Platform) -> dict:
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
        "waitForPodsReady": wait_for_pods_ready(platform),
    }
