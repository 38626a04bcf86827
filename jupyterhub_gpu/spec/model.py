"""The GPU platform spec as frozen dataclasses.

One admin-written YAML document is parsed once (see :mod:`jupyterhub_gpu.spec.parse`) into
a :class:`Platform`. Everything else -- the spawn form, the pod settings, the Kueue
objects, the device-plugin configs, the fake nodes of the dev cluster -- is derived
from these objects by pure functions.

The defaults of the spec's optional fields are the defaults of these dataclasses'
fields, and only there: the parser and the generated reference read them with
:func:`default_of`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Mapping

from ..contract import (AGENTPOOL_LABEL, GPU_TAINT_KEY, GPU_TAINT_VALUE, NODEPOOL_LABEL,
                        SPOT_LABEL, SPOT_VALUE)
from .gpus import GpuModel
from .sharing import SharingMode

REQUIRED = dataclasses.MISSING


def default_of(cls: type, name: str) -> object:
    """The default of dataclass ``cls``'s field ``name`` (:data:`REQUIRED` if none)."""
    found = next(f for f in dataclasses.fields(cls) if f.name == name)
    if found.default_factory is not dataclasses.MISSING:
        return found.default_factory()
    return found.default


@dataclass(frozen=True)
class Sharing:
    """How a pool's GPUs are handed out; everything mode-specific is in ``mode``'s
    record (:mod:`jupyterhub_gpu.spec.sharing`)."""

    mode: SharingMode
    mig_profile: str | None = None  # only for a mode whose parameter is migProfile
    replicas: int = 1  # only for a mode whose parameter is replicas

    @property
    def shared(self) -> bool:
        return self.mode.shared


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str = "NoSchedule"

    def as_dict(self) -> dict:
        return {"key": self.key, "value": self.value, "effect": self.effect}

    def toleration(self) -> dict:
        return {"key": self.key, "operator": "Equal", "value": self.value,
                "effect": self.effect}


GPU_TAINT = Taint(GPU_TAINT_KEY, GPU_TAINT_VALUE)
SPOT_TAINT = Taint(SPOT_LABEL, SPOT_VALUE)


@dataclass(frozen=True)
class DaemonsetOverhead:
    """CPU and memory the daemonset pods request on every node of a pool, before any
    notebook arrives: on AKS the CNI agent, the CSI node drivers, cloud-node-manager
    and the monitoring agent, plus the GPU Operator's device plugin, feature discovery
    and DCGM exporter. The defaults are an estimate; ``kubectl describe node`` shows
    the real sum (see :mod:`jupyterhub_gpu.spec.allocatable`)."""

    cpu: float = 0.5  # cores
    memory_bytes: int = 1536 * 2**20


class Autoscaler(StrEnum):
    """What adds and removes a pool's nodes on AKS. The dev cluster runs Karpenter for
    every pool either way."""

    #: an AKS node pool (a scale set) whose size the cluster autoscaler sets
    CLUSTER_AUTOSCALER = "cluster-autoscaler"
    #: a Karpenter NodePool of AKS Node Auto Provisioning, which starts VMs one by one
    NODE_AUTO_PROVISIONING = "node-auto-provisioning"

    @property
    def pool_label(self) -> str:
        """The node label whose value is the pool's name: AKS sets the agent pool's on
        a scale set's nodes, Karpenter its NodePool's on the nodes it starts."""
        return NODEPOOL_LABEL if self is Autoscaler.NODE_AUTO_PROVISIONING else AGENTPOOL_LABEL


@dataclass(frozen=True)
class Pool:
    """One node pool of one VM size: an AKS agent pool, or a NodePool of Node Auto
    Provisioning (``autoscaler``). A pool with ``gpu: none`` is CPU-only: its sharing
    mode is the registry's mode without a GPU (:func:`~jupyterhub_gpu.spec.sharing.cpu_only_mode`)
    and its unit of quota is one node's cpu and memory."""

    name: str
    vm_size: str
    gpu: GpuModel
    gpus_per_node: int
    sharing: Sharing
    cpus_per_node: int
    memory_per_node: int  # bytes
    spot: bool = False
    min_nodes: int = 0
    max_nodes: int = 1
    price_per_node_hour: float = 0.0
    # How long a node must have been empty before the autoscaler removes it.
    consolidate_after_seconds: int = 600
    # How long a new node takes from the autoscaler's decision until it is Ready (the
    # dev cluster simulates it; users are told to expect it).
    boot_seconds: int = 300
    daemonset_overhead: DaemonsetOverhead = DaemonsetOverhead()
    autoscaler: Autoscaler = Autoscaler.CLUSTER_AUTOSCALER

    @property
    def node_auto_provisioning(self) -> bool:
        return self.autoscaler is Autoscaler.NODE_AUTO_PROVISIONING

    @property
    def has_gpu(self) -> bool:
        return self.sharing.mode.gpu

    @property
    def resource_name(self) -> str:
        """The extended resource the NVIDIA device plugin advertises on this pool
        (empty on a CPU-only pool)."""
        return self.sharing.mode.resource_name(self.sharing)

    def gpu_resources(self, units: int) -> dict[str, str]:
        """``units`` of the pool's GPU resource, as requests (none on a CPU pool)."""
        return {self.resource_name: str(units)} if self.resource_name else {}

    @property
    def kind(self) -> str:
        """What a machine of the pool is, in messages: ``T4``, ``CPU``."""
        return self.gpu.name if self.has_gpu else "CPU"

    @property
    def units_per_gpu(self) -> int:
        return self.sharing.mode.units_per_gpu(self.sharing, self.gpu)

    @property
    def units_per_node(self) -> int:
        return self.sharing.mode.units_per_node(self.sharing, self.gpu, self.gpus_per_node)

    @property
    def unit_name(self) -> str:
        return self.sharing.mode.unit

    @property
    def unit_memory_gb(self) -> int:
        """GPU memory one unit may use (a shared unit can reach the whole GPU's)."""
        mig = self.gpu.mig_profile(self.sharing.mig_profile or "")
        return mig.memory_gb if mig else self.gpu.memory_gb

    @property
    def price_per_unit_hour(self) -> float:
        return self.price_per_node_hour / self.units_per_node

    @property
    def node_selector(self) -> dict[str, str]:
        """What the pods (and Kueue's ResourceFlavor ``nodeLabels``) select: the one
        label whose value is the pool's name on every node of the pool."""
        return {self.autoscaler.pool_label: self.name}

    @property
    def taints(self) -> tuple[Taint, ...]:
        gpu = (GPU_TAINT,) if self.has_gpu else ()
        return (*gpu, SPOT_TAINT) if self.spot else gpu

    @property
    def device_plugin_config(self) -> str:
        """Name of this pool's entry in the device-plugin config map."""
        return self.sharing.mode.config_name(self.sharing)


@dataclass(frozen=True)
class Team:
    name: str
    groups: tuple[str, ...]
    namespace: str
    quota: Mapping[str, int]  # pool name -> nominal units
    cohort: str = "jupyterhub-gpu"
    borrowing_limit: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    lending_limit: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # JupyterHub groups whose members see the whole team's usage (the usage page)
    lead_groups: tuple[str, ...] = ()

    @property
    def local_queue(self) -> str:
        return self.name

    @property
    def cluster_queue(self) -> str:
        return self.name


@dataclass(frozen=True)
class Priority:
    name: str
    value: int
    description: str = ""
    preemptible: bool = False


@dataclass(frozen=True)
class Checkpoint:
    """A profile's ``checkpoint`` block; a block given is on unless it says otherwise."""

    enabled: bool = True
    grace_period_seconds: int = 30


#: A profile without a ``checkpoint`` block: no checkpoint volume, the pod's own grace.
CHECKPOINT_OFF = Checkpoint(enabled=False)


@dataclass(frozen=True)
class GpuIdle:
    """Cull when the GPU stayed under ``threshold_percent`` for ``window_seconds``
    (needs the culler's Prometheus URL; see docs)."""

    threshold_percent: float
    window_seconds: int


@dataclass(frozen=True)
class CheckpointStorage:
    """Where checkpoints live: a ReadWriteMany PVC (e.g. backed by Azure Files)."""

    claim_name: str
    mount_path: str = "/home/jovyan/checkpoints"


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


@dataclass(frozen=True)
class Profile(_OnPools):
    slug: str
    display_name: str
    pool: str
    cpu: float
    memory_bytes: int
    image: str
    priority: str
    units: int = 1  # GPUs, MIG slices or shares of the pool's resource (0: a CPU pool)
    description: str = ""
    idle_timeout_seconds: int = 1800
    max_age_seconds: int | None = None
    queue_patience_seconds: int = 600  # how long a user waits in the Kueue queue
    start_timeout_seconds: int = 300  # from admission to a running server
    gpu_idle: GpuIdle | None = None
    allowed_groups: tuple[str, ...] = ()  # empty: every user who is in a team
    checkpoint: Checkpoint = CHECKPOINT_OFF
    default: bool = False
    # a fallback profile: every pool it may run on, in order of preference (``pool`` is
    # the first); empty: ``pool`` only
    pools: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobProfile(_OnPools):
    """A kind of batch job users may submit: a Kueue-queued ``batch/v1`` Job of
    ``pods`` pods, each with ``units`` of its pool's GPU resource
    (:mod:`jupyterhub_gpu.builders.job`)."""

    kind = "job profile"
    slug: str
    display_name: str
    pool: str
    cpu: float  # per pod
    memory_bytes: int  # per pod
    priority: str
    units: int = 1  # GPUs (or slices, shares) per pod; 0 on a CPU pool
    pods: int = 1  # more than 1: an Indexed Job with PyTorch DDP's rendezvous
    description: str = ""
    image: str = ""  # empty: the image of the user's running server
    max_run_seconds: int = 24 * 3600  # the Job's activeDeadlineSeconds
    # crashes retried (the Job's backoffLimit); a disruption never counts
    retries: int = 2
    checkpoint: Checkpoint = CHECKPOINT_OFF
    allowed_groups: tuple[str, ...] = ()  # empty: every user who is in a team
    pools: tuple[str, ...] = ()  # as a fallback profile's


#: Whatever asks for a pool: a notebook profile or a job profile.
AnyProfile = Profile | JobProfile


@dataclass(frozen=True)
class Monitoring:
    """The thresholds of the bundle's Prometheus alerts (``config/prometheus-rules.yaml``)."""

    gpu_utilization_target_percent: float = 70.0  # the design's production target
    queue_wait_p95_seconds: int = 300
    spot_eviction_rate: float = 0.2  # above it, consider reserved capacity
    pool_at_max_seconds: int = 1800
    idle_gpu_node_seconds: int = 900


@dataclass(frozen=True)
class Platform:
    pools: tuple[Pool, ...]
    teams: tuple[Team, ...]
    priorities: tuple[Priority, ...]
    profiles: tuple[Profile, ...]
    checkpoint_storage: CheckpointStorage | None = None
    # group name -> Entra ID object ID, for tokens whose groups claim carries IDs
    group_ids: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # the idle timeout of a profile on a CPU-only pool that sets no idleTimeout
    cpu_idle_timeout_seconds: int = 4 * 3600
    # how many servers of GPU profiles one user may run at once (named servers)
    gpu_servers_per_user: int = 1
    job_profiles: tuple[JobProfile, ...] = ()
    # how many of one user's jobs may be queued or running at once
    jobs_per_user: int = 2
    monitoring: Monitoring = Monitoring()

    @property
    def gpu_pools(self) -> tuple[Pool, ...]:
        return tuple(p for p in self.pools if p.has_gpu)

    def pool(self, name: str) -> Pool:
        """The pool called ``name``; a ``KeyError`` naming the spec's pools if none is
        (a bare ``next()`` would raise StopIteration, which a generator or coroutine
        turns into a RuntimeError that names nothing)."""
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(f"no pool named {name!r} in the spec (its pools: "
                       f"{', '.join(p.name for p in self.pools)})")

    @property
    def all_profiles(self) -> tuple[Profile | JobProfile, ...]:
        """Notebook profiles, then job profiles: everything that asks for a pool."""
        return (*self.profiles, *self.job_profiles)

    def job_profile(self, slug: str) -> JobProfile | None:
        return next((p for p in self.job_profiles if p.slug == slug), None)

    def pools_of(self, profile: Profile | JobProfile) -> tuple[Pool, ...]:
        """The pools ``profile`` may run on, in its order of preference."""
        return tuple(self.pool(name) for name in profile.pool_names)

    def priority(self, name: str) -> Priority:
        return next(p for p in self.priorities if p.name == name)

    def cohort_namespaces(self, team: Team) -> list[str]:
        """The namespaces of ``team``'s cohort (its own included): Kueue borrows and
        preempts within a cohort only."""
        return sorted({t.namespace for t in self.teams if t.cohort == team.cohort})

    def profile(self, slug: str) -> Profile | None:
        return next((p for p in self.profiles if p.slug == slug), None)

    def uses_gpu(self, profile: Profile) -> bool:
        """Whether ``profile``'s servers hold a GPU (count against the per-user cap)."""
        return self.pool(profile.pool).has_gpu

    def team_for(self, groups: frozenset[str] | set[str]) -> Team | None:
        """The first team (in spec order) that one of ``groups`` belongs to."""
        return next((t for t in self.teams if set(t.groups) & set(groups)), None)

    def teams_led_by(self, groups: frozenset[str] | set[str]) -> tuple[Team, ...]:
        """The teams whose ``leadGroups`` one of ``groups`` is in."""
        return tuple(t for t in self.teams if set(t.lead_groups) & set(groups))

    def profiles_for(self, groups: frozenset[str] | set[str]) -> tuple[Profile, ...]:
        """The profiles a user in ``groups`` may start (none without a team)."""
        if self.team_for(groups) is None:
            return ()
        allowed = [p for p in self.profiles
                   if not p.allowed_groups or set(p.allowed_groups) & set(groups)]
        # CPU profiles first, each kind in spec order (the form lists them so)
        return tuple(sorted(allowed, key=self.uses_gpu))
