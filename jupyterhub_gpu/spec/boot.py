"""How long a new node of a pool takes before a pod can start on it (``bootTime``),
and the windows that follow from it.

A pool's ``bootTime`` defaults by what its nodes must do before they advertise their
GPU resource (:func:`default_boot_seconds`). Neither Microsoft nor NVIDIA publishes
how long each step takes; the defaults are budgets built from what they do publish:

* **every node** (:data:`VM_BOOT_SECONDS`, 5m): the VM boots and joins the cluster.
  AKS's cluster autoscaler gives a new node up to ``max-node-provision-time`` (15m,
  AKS's default, "ManagedClusterAutoScalerProfile.MaxNodeProvisionTime") before it
  counts the scale-up as failed; the bundle keeps that above every pool's bootTime
  (:mod:`jupyterhub_gpu.bundle.terraform`).
* **a GPU node** adds the GPU Operator's driver container (:data:`DRIVER_SECONDS`,
  5m): with ``gpu_driver = "None"`` AKS installs no driver ("Use the NVIDIA GPU
  Operator on AKS"), and the operator's conventional driver container builds the
  kernel module on every new node (NVIDIA, "Precompiled Driver Containers"; Red Hat
  measured precompiled drivers cutting a GPU node's provisioning by about half, 2 to
  3 minutes). The toolkit, the device plugin and its validation start after it. The
  operator's chart itself lets the driver container take up to 60 s + 120 x 10 s
  before its startup probe fails (``driver.startupProbe``, gpu-operator
  ``deployments/gpu-operator/values.yaml``).
* **a MIG node** adds a reboot (:data:`MIG_REBOOT_SECONDS`, 5m): on a cloud VM the
  MIG manager must reboot the node to change MIG mode (``WITH_REBOOT=true``, NVIDIA
  "GPU Operator with MIG"), after which the node boots again, the driver container
  loads the driver again and the MIG manager creates the instances.

The image pull is not in ``bootTime``: it is part of the profile's ``startTimeout``
(from a node with room to a running server).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .quantities import format_duration

if TYPE_CHECKING:
    from .model import Platform, Pool, Sharing
    from .profiles import Profile

#: a VM's boot and join, every pool
VM_BOOT_SECONDS = 300
#: the GPU Operator's driver container (a kernel module built on the node), GPU pools
DRIVER_SECONDS = 300
#: the MIG manager's reboot, the driver loaded again and the MIG instances made
MIG_REBOOT_SECONDS = 300
#: beyond a boot and a start: the autoscaler's or Karpenter's batching, the node's
#: registration, the scheduler's retry, the kubelet's first readiness
READY_MARGIN_SECONDS = 60


def boot_seconds_for(gpu: bool, mig: bool) -> int:
    """The default ``bootTime`` of a pool with GPUs (``gpu``) in MIG mode (``mig``)."""
    return (VM_BOOT_SECONDS + (DRIVER_SECONDS if gpu else 0)
            + (MIG_REBOOT_SECONDS if mig else 0))


def default_boot_seconds(sharing: Sharing) -> int:
    """A pool's ``bootTime`` when the spec gives none: 5m for a CPU-only pool, 10m for
    a GPU pool (the operator installs the driver), 15m for a MIG pool (and its reboot)."""
    return boot_seconds_for(sharing.mode.gpu, sharing.mode.partitioned)


#: the defaults, as the reference states them
DEFAULT_WORDS = (f"{format_duration(boot_seconds_for(False, False))}; "
                 f"{format_duration(boot_seconds_for(True, False))} with GPUs, "
                 f"{format_duration(boot_seconds_for(True, True))} with MIG")


def ready_window(platform: Platform, profile: Profile) -> int:
    """From admission to a Ready server at worst: a new node of the slowest of the
    profile's pools, then the profile's ``startTimeout`` (image pull, server start),
    plus :data:`READY_MARGIN_SECONDS`."""
    boot = max(pool.boot_seconds for pool in platform.pools_of(profile))
    return boot + profile.start_timeout_seconds + READY_MARGIN_SECONDS


def spawn_patience(platform: Platform, profile: Profile) -> int:
    """How long the hub waits for a server of ``profile`` (the spawner's
    ``start_timeout``): its queue patience, then :func:`ready_window`. Kueue's
    ``waitForPodsReady`` timeout is at least the same window, so the hub never gives
    up on a server that Kueue and the spec still allow to start."""
    return profile.queue_patience_seconds + ready_window(platform, profile)


def slowest_boot(pools: tuple[Pool, ...]) -> int:
    """The longest ``bootTime`` of ``pools`` (0 without pools)."""
    return max((p.boot_seconds for p in pools), default=0)
