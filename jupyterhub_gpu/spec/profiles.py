"""What users start: notebook profiles (``profiles[]``) and job profiles
(``jobProfiles[]``), with the blocks they share, as frozen dataclasses.

Each field is declared once, with its YAML key, reader, default and description
(:func:`jupyterhub_gpu.spec.keys.key`); :mod:`jupyterhub_gpu.spec.model` re-exports
these classes.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import quantities as q
from ..contract import (ENV_CHECKPOINT_DIR, ENV_MASTER_ADDR,
                        ENV_MASTER_PORT, ENV_POOL, ENV_RANK, ENV_WORLD_SIZE)
from .keys import key
from .readers import DNS_LABEL, read_bool, read_int, read_name, read_names, read_percent
from .readers import read_pool_list, read_str

_SLUG = read_name(DNS_LABEL, "a slug (a-z, 0-9, -)")


@dataclass(frozen=True)
class Checkpoint:
    """A profile's ``checkpoint`` block; a block given is on unless it says otherwise."""

    enabled: bool = key("enabled", "boolean", read_bool, "Mount the checkpoint PVC "
                        "(per-user subPath) and set the grace period.", default=True)
    grace_period_seconds: int = key(
        "gracePeriod", "duration", q.parse_duration, "terminationGracePeriodSeconds; at "
        "most 30s on spot pools (Azure's eviction notice).", default=30)


#: A profile without a ``checkpoint`` block: no checkpoint volume, the pod's own grace.
CHECKPOINT_OFF = Checkpoint(enabled=False)


@dataclass(frozen=True)
class GpuIdle:
    """Cull when the GPU stayed under ``threshold_percent`` for ``window_seconds``
    (needs the culler's Prometheus URL; see docs)."""

    threshold_percent: float = key("threshold", "percent", read_percent,
                                   "GPU utilisation below which the GPU is idle.")
    window_seconds: int = key("window", "duration", q.parse_duration,
                              "How long it must stay idle.")


class _OnPools:
    """What a notebook profile and a job profile share: the pools they run on."""

    #: how messages name it: ``profile 'x'``, ``job profile 'x'``
    kind = "profile"
    pool: str
    pools: tuple[str, ...]

    @property
    def pool_names(self) -> tuple[str, ...]:
        """The pools it may run on, the preferred first."""
        return self.pools or (self.pool,)

    @property
    def fallback(self) -> bool:
        """More than one pool: Kueue picks the first with room (flavor fungibility)."""
        return len(self.pool_names) > 1


@dataclass(frozen=True, kw_only=True)
class Profile(_OnPools):
    """A notebook profile: what users choose on the spawn form."""

    slug: str = key("slug", "DNS label", _SLUG, "The form value and the pod's profile label.")
    display_name: str = key("displayName", "string", read_str, "Title on the spawn form.")
    description: str = key("description", "string", read_str, "Text on the spawn form.",
                           default="")
    pool: str = key("pool", "pool name", read_str, "The pool the server runs on; or give "
                    "`pools`.")
    # the preferred pool is ``pool`` too; empty: ``pool`` only
    pools: tuple[str, ...] = key(
        "pools", "list of pool names", read_pool_list, "Instead of `pool`: a fallback "
        "profile's pools in order of preference, e.g. `[a100spot, a100]`; the server runs "
        "on the first with room (Kueue's flavor fungibility). All must offer the same kind "
        "of GPU unit in the same sharing mode (no CPU-only pool), the profile must fit a node "
        "of each, and no two profiles may prefer two pools the other way round. The form "
        f"shows the price range; `{ENV_POOL}` tells the notebook which pool it got.",
        default=(), words="`pool` only")
    # GPUs, MIG slices or shares of the pool's resource (0: a CPU pool)
    units: int = key("gpus", "integer", read_int(1), "Units of the pool's GPU resource (1 "
                     "on shared pools); not on a CPU-only pool, where the server asks for "
                     "no GPU.", default=1)
    cpu: float = key("cpu", "cpu quantity", q.parse_cpu, "CPU guarantee and limit, e.g. `8` "
                     "or `500m`. The pool's units per node times this, divided by `gpus`, "
                     "must fit one node's allocatable less `daemonsetOverhead`.")
    memory_bytes: int = key("memory", "quantity", q.parse_memory, "Memory guarantee and "
                            "limit, e.g. `96Gi`; must fit the node like `cpu`.")
    image: str = key("image", "string", read_str, "Notebook image, e.g. "
                     "`myregistry.azurecr.io/lab:2.1`.", default=None,
                     words="the bundle's notebook image in `registry`")
    priority: str = key("priority", "priority name", read_str, "The Kueue priority of the "
                        "server.")
    idle_timeout_seconds: int = key(
        "idleTimeout", "duration", q.parse_duration, "Idle time before the culler stops "
        "the server; on a CPU-only pool the default is the spec's `cpuIdleTimeout`.",
        default=1800)
    max_age_seconds: int | None = key("maxAge", "duration", q.parse_duration, "Age at which "
                                      "the culler stops the server.", default=None)
    queue_patience_seconds: int = key("queuePatience", "duration", q.parse_duration,
                                      "How long a user waits in the Kueue queue.",
                                      default=600)
    start_timeout_seconds: int = key("startTimeout", "duration", q.parse_duration,
                                     "From admission to a running server.", default=300)
    gpu_idle: GpuIdle | None = key("gpuIdle", "mapping", None, "Cull on low GPU use (see "
                                   "`gpuIdle`); not on a CPU-only pool.", default=None)
    # None on a CPU-only pool, whose profile offers no GPU kernel
    kernel_idle_timeout_seconds: int | None = key(
        "kernelIdleTimeout", "duration", q.parse_duration, "How long no cell may have run in "
        "a GPU kernel of this profile (started from a CPU server) before it is shut down and "
        "its GPU released; a cell still running is never idle. Not on a CPU-only pool. GPU "
        "kernels are being built: `docs/kernels.md` says what works so far.",
        default=15 * 60)
    allowed_groups: tuple[str, ...] = key("allowedGroups", "list of strings", read_names,
                                          "Groups that may use it.", default=(),
                                          words="every team member")
    checkpoint: Checkpoint = key(
        "checkpoint", "mapping", None, "Checkpoint storage and grace period. Without it the "
        "profile mounts no checkpoint PVC and its pods keep Kubernetes' 30s grace period; "
        "a `checkpoint` block turns both on unless it says `enabled: false`.",
        default=CHECKPOINT_OFF, words="off")
    default: bool = key("default", "boolean", read_bool, "Preselected on the form.",
                        default=False)


@dataclass(frozen=True, kw_only=True)
class JobProfile(_OnPools):
    """A kind of batch job users may submit: a Kueue-queued ``batch/v1`` Job of
    ``pods`` pods, each with ``units`` of its pool's GPU resource
    (:mod:`jupyterhub_gpu.builders.job`)."""

    kind = "job profile"
    slug: str = key("slug", "DNS label", _SLUG, "The name users submit a job with.")
    display_name: str = key("displayName", "string", read_str, "Title in job listings.")
    description: str = key("description", "string", read_str, "What the job profile is for.",
                           default="")
    pool: str = key("pool", "pool name", read_str, "The pool the job's pods run on; or give "
                    "`pools`.")
    pools: tuple[str, ...] = key(
        "pools", "list of pool names", read_pool_list, "Instead of `pool`: pools in order "
        "of preference, validated as a fallback profile's (same kind of GPU unit and sharing "
        "mode, the pod fits a node of each, one order for all profiles).", default=(),
        words="`pool` only")
    units: int = key("gpus", "integer", read_int(1), "Units of the pool's GPU resource per "
                     "pod; not on a CPU-only pool, where the pods ask for no GPU.", default=1)
    pods: int = key("pods", "integer >= 1", read_int(1), "Pods of one job. More than 1: an "
                    "Indexed Job whose pods get PyTorch DDP's rendezvous environment "
                    f"(`{ENV_MASTER_ADDR}`, `{ENV_MASTER_PORT}`, `{ENV_WORLD_SIZE}`, "
                    f"`{ENV_RANK}`), admitted by Kueue all at once.", default=1)
    cpu: float = key("cpu", "cpu quantity", q.parse_cpu, "CPU guarantee and limit per pod; "
                     "must fit the pool's node as a notebook profile's `cpu` does.")
    memory_bytes: int = key("memory", "quantity", q.parse_memory, "Memory guarantee and "
                            "limit per pod; must fit the node.")
    image: str = key("image", "string", read_str, "The job's image; empty: the image of the "
                     "user's running server.", default="")
    priority: str = key("priority", "priority name", read_str, "The Kueue priority of the "
                        "job.")
    max_run_seconds: int = key("maxRunTime", "duration", q.parse_duration, "The Job's "
                               "`activeDeadlineSeconds`: it fails once it has run this "
                               "long, retries and restarts included.", default=24 * 3600)
    retries: int = key("retries", "integer >= 0", read_int(0), "How often a crashed pod (a "
                       "non-zero exit) is started again (the Job's `backoffLimit`). A "
                       "disruption (spot eviction, preemption, a node going away) never "
                       "counts against it.", default=2)
    checkpoint: Checkpoint = key(
        "checkpoint", "mapping", None, "As a notebook profile's: the checkpoint PVC at the "
        f"same per-user path, `{ENV_CHECKPOINT_DIR}`, and the grace period.",
        default=CHECKPOINT_OFF, words="off")
    allowed_groups: tuple[str, ...] = key("allowedGroups", "list of strings", read_names,
                                          "Groups that may submit it.", default=(),
                                          words="every team member")


#: Whatever asks for a pool: a notebook profile or a job profile.
AnyProfile = Profile | JobProfile
