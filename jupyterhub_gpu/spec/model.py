"""The GPU platform spec as frozen dataclasses.

One admin-written YAML document is parsed once (see :mod:`jupyterhub_gpu.spec.parse`) into
a :class:`Platform`. Everything else -- the spawn form, the pod settings, the Kueue
objects, the device-plugin configs, the fake nodes of the dev cluster -- is derived
from these objects by pure functions.

Each field of the spec is declared once, on its dataclass field
(:func:`~jupyterhub_gpu.spec.keys.key`): its YAML key, reader, default and description.
The parser's field list, its typed reads and the generated reference are read from
there (:func:`~jupyterhub_gpu.spec.keys.keys_of`). The profiles' classes are in
:mod:`jupyterhub_gpu.spec.profiles`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Mapping

from . import boot
from . import quantities as q
from . import sharing as modes
from ..contract import (AGENTPOOL_LABEL, BATCH_API_VERSION, GPU_TAINT_KEY, GPU_TAINT_VALUE,
                        NODEPOOL_LABEL, SPOT_LABEL, SPOT_VALUE, USER_TAINT_KEY)
from .gpus import GPU_MODELS, GpuModel
from .images import ACR_LOGIN_SUFFIX, NOTEBOOK_IMAGE
from .keys import REQUIRED, default_of, key
from .profiles import CHECKPOINT_OFF, AnyProfile, Checkpoint, GpuIdle, JobProfile, Profile
from .readers import (ACR_NAME, DNS_LABEL, POOL_NAME, or_zero, read_bool, read_choice, read_counts,
                      read_duration_or_zero, read_int, read_name, read_names, read_number,
                      read_percent, read_ratio, read_str)
from .sharing import Parameter, SharingMode

__all__ = ["REQUIRED", "default_of", "CHECKPOINT_OFF", "AnyProfile", "Checkpoint", "GpuIdle",
           "JobProfile", "Profile", "Sharing", "Taint", "GPU_TAINT", "SPOT_TAINT",
           "USER_TAINT",
           "DaemonsetOverhead", "Autoscaler", "AKS_BOTH_AUTOSCALERS_FEATURE", "Pool", "Team",
           "Priority", "CheckpointStorage", "Monitoring", "Platform"]

_NO_GPU_POOL = "not on a pool with `gpu: none`"


def _read_mode(v: object) -> SharingMode:
    """A registered sharing mode, looked up when read (the registry may have grown)."""
    return read_choice(modes.MODES, "sharing mode")(v)


@dataclass(frozen=True)
class Sharing:
    """How a pool's GPUs are handed out; everything mode-specific is in ``mode``'s
    record (:mod:`jupyterhub_gpu.spec.sharing`)."""

    mode: SharingMode = key("mode", "string", _read_mode,
                            "One of the sharing modes listed below.")
    mig_profile: str | None = key("migProfile", "string", read_str, "MIG instance profile, "
                                  "e.g. `3g.40gb`.", default=None,
                                  words=Parameter.MIG_PROFILE)
    replicas: int = key("replicas", "integer >= 2", read_int(2), "Shares per GPU.",
                        default=1, words=Parameter.REPLICAS)

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
USER_TAINT = Taint(USER_TAINT_KEY, "user")  # z2jh's user pods tolerate this value


@dataclass(frozen=True)
class DaemonsetOverhead:
    """CPU and memory the daemonset pods request on every node of a pool, before any
    notebook arrives: on AKS the CNI agent, the CSI node drivers, cloud-node-manager
    and the monitoring agent, plus the GPU Operator's device plugin, feature discovery
    and DCGM exporter. The defaults are an estimate; ``kubectl describe node`` shows
    the real sum (see :mod:`jupyterhub_gpu.spec.allocatable`)."""

    cpu: float = key("cpu", "cpu quantity or 0", or_zero(q.parse_cpu), "CPU the node's "
                     "daemonset pods request (CNI, CSI drivers, monitoring agent, GPU "
                     "Operator).", default=0.5)
    memory_bytes: int = key("memory", "quantity or 0", or_zero(q.parse_memory), "Memory they "
                            "request. Each profile's share of the node must fit in the "
                            "allocatable less this.", default=1536 * 2**20)


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


#: the subscription feature without which AKS does not run Node Auto Provisioning on a
#: cluster whose node pools the cluster autoscaler scales (MicrosoftDocs/azure-aks-docs,
#: articles/aks/migrate-from-autoscaler-to-node-auto-provisioning.md)
AKS_BOTH_AUTOSCALERS_FEATURE = "AllowClusterAutoscalerAndNAP"


def _autoscaler_doc() -> str:
    return (f"What scales the pool on AKS: `{Autoscaler.CLUSTER_AUTOSCALER}` (an AKS node "
            f"pool of the cluster autoscaler) or `{Autoscaler.NODE_AUTO_PROVISIONING}` (a "
            f"Karpenter NodePool of AKS Node Auto Provisioning; for "
            f"{modes.modes_where(lambda m: m.vm_resource)} pools or CPU-only ones, with "
            f"`minNodes: 0`). Both in one cluster need the subscription feature "
            f"`{AKS_BOTH_AUTOSCALERS_FEATURE}` (see the Terraform docs). The dev cluster runs "
            "Karpenter for every pool either way.")


_OVERHEAD = (f"{q.format_cpu(default_of(DaemonsetOverhead, 'cpu'))} cpu, "
             f"{q.format_memory(default_of(DaemonsetOverhead, 'memory_bytes'))}")


@dataclass(frozen=True, kw_only=True)
class Pool:
    """One node pool of one VM size: an AKS agent pool, or a NodePool of Node Auto
    Provisioning (``autoscaler``). A pool with ``gpu: none`` is CPU-only: its sharing
    mode is the registry's mode without a GPU (:func:`~jupyterhub_gpu.spec.sharing.cpu_only_mode`)
    and its unit of quota is one node's cpu and memory."""

    name: str = key(
        "name", "string", read_name(POOL_NAME, "an AKS pool name (a-z then a-z0-9, at most 12)"),
        "AKS agent pool (or Node Auto Provisioning NodePool) name: a-z then a-z0-9, at most "
        "12. Pods and Kueue's ResourceFlavor select it with "
        f"`{Autoscaler.CLUSTER_AUTOSCALER.pool_label}`, or "
        f"`{Autoscaler.NODE_AUTO_PROVISIONING.pool_label}` under Node Auto Provisioning.")
    vm_size: str = key("vmSize", "string", read_str, "Azure VM size, e.g. "
                       "`Standard_NC24ads_A100_v4`.")
    gpu: GpuModel = key("gpu", "string", read_choice(GPU_MODELS, "gpu model"), "GPU model; "
                        "must match the VM size. `none`: a CPU-only pool (a VM size without "
                        "GPUs), whose pods request no GPU and tolerate no GPU taint, and "
                        "whose quota is counted in nodes. Its nodes carry z2jh's user taint "
                        f"`{USER_TAINT.key}={USER_TAINT.value}:{USER_TAINT.effect}`, which the "
                        "notebooks and jobs tolerate and kube-system pods do not.")
    gpus_per_node: int = key("gpusPerNode", "integer", read_int(1), "Required for GPU VM "
                             f"sizes not listed below; {_NO_GPU_POOL}.", words="from vmSize")
    sharing: Sharing = key("sharing", "mapping", None, "How one GPU is shared (see "
                           f"`sharing`); {_NO_GPU_POOL}.")
    spot: bool = key("spot", "boolean", read_bool, "An Azure Spot pool: cheaper, may be "
                     "evicted.", default=False)
    min_nodes: int = key("minNodes", "integer", read_int(0), "Smallest size; 0 lets the pool "
                         "scale to zero. The dev cluster keeps this many static nodes. 0 "
                         "under Node Auto Provisioning (a NodePool has no minimum).",
                         default=0)
    max_nodes: int = key("maxNodes", "integer", read_int(1), "Largest size the autoscaler "
                         "may reach: on AKS the node pool's `max_count` or the NodePool's "
                         "`limits.nodes`; in the dev cluster its Karpenter NodePool's limit.",
                         default=1)
    price_per_node_hour: float = key("pricePerNodeHour", "number", read_number, "Price of one "
                                     "node-hour, for the spawn form.", default=0.0)
    cpus_per_node: int = key("cpusPerNode", "integer", read_int(1), "vCPUs of one node.",
                             words="from vmSize")
    memory_per_node: int = key("memoryPerNode", "quantity", q.parse_memory, "Memory of one "
                               "node, e.g. `220Gi`; for the tightest fit, the node's "
                               "`capacity.memory`.", words="from vmSize")  # bytes
    consolidate_after_seconds: int = key(
        "consolidateAfter", "duration or 0", read_duration_or_zero, "How long a node must "
        "have been empty (no notebook on it) before it is removed; `0s`: as soon as the "
        "autoscaler notices. The NodePools use it (the dev cluster's, and Node Auto "
        "Provisioning's). The cluster autoscaler has one `scale_down_unneeded` for all its "
        "pools: the shortest `consolidateAfter` among them, rounded up to whole minutes, at "
        "least 1m (AKS takes no less).", default=600)
    boot_seconds: int = key(
        "bootTime", "duration or 0", read_duration_or_zero, "How long a new node takes "
        "until a pod can start on it, e.g. `12m`: boot and join, on a GPU pool the GPU "
        "Operator's driver install, on a MIG pool its reboot into MIG mode too (the "
        "image pull is the profile's `startTimeout`). Kueue's `waitForPodsReady`, the "
        "hub's wait for a server and the autoscaler's `max_node_provisioning_time` "
        "follow the slowest pool; the dev cluster's Karpenter waits this long before a "
        "node it adds registers.", default=None,
        words=boot.DEFAULT_WORDS)
    daemonset_overhead: DaemonsetOverhead = key(
        "daemonsetOverhead", "mapping", None, "What the daemonsets request on each node (see "
        "`daemonsetOverhead`).", default=DaemonsetOverhead(), words=_OVERHEAD)
    autoscaler: Autoscaler = key(
        "autoscaler", "string", read_choice({a.value: a for a in Autoscaler}, "autoscaler"),
        _autoscaler_doc, default=Autoscaler.CLUSTER_AUTOSCALER)

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
        """A GPU pool's GPU taint, a CPU-only pool's user taint (so that no kube-system
        pod lands on a node of it and keeps it from scaling down), and a spot pool's
        spot taint."""
        kind = GPU_TAINT if self.has_gpu else USER_TAINT
        return (kind, SPOT_TAINT) if self.spot else (kind,)

    @property
    def device_plugin_config(self) -> str:
        """Name of this pool's entry in the device-plugin config map."""
        return self.sharing.mode.config_name(self.sharing)


@dataclass(frozen=True)
class Team:
    name: str = key("name", "DNS label", read_name(DNS_LABEL, "a DNS label (a-z, 0-9, -)"),
                    "Also the name of its ClusterQueue and LocalQueue.")
    groups: tuple[str, ...] = key("groups", "list of strings", read_names, "JupyterHub "
                                  "groups whose members belong to the team (the first "
                                  "matching team wins).")
    namespace: str = key("namespace", "namespace name", read_name(DNS_LABEL, "a namespace "
                         "name"), "Where the team's user pods run.")
    quota: Mapping[str, int] = key(
        "quota", "pool -> integer", read_counts, "Nominal quota per pool, in the pool's GPU "
        "units (GPUs, MIG slices or shares); on a CPU-only pool in nodes (a node's cpu and "
        "memory, less what AKS and the daemonsets keep).")
    cohort: str = key("cohort", "DNS label", read_name(DNS_LABEL, "a DNS label"), "Kueue "
                      "cohort: teams in one cohort borrow each other's unused quota.",
                      default="jupyterhub-gpu")
    borrowing_limit: Mapping[str, int] = key(
        "borrowingLimit", "pool -> integer", read_counts, "Most units borrowed per pool.",
        default_factory=lambda: MappingProxyType({}), words="unlimited")
    lending_limit: Mapping[str, int] = key(
        "lendingLimit", "pool -> integer", read_counts, "Most units lent per pool.",
        default_factory=lambda: MappingProxyType({}), words="unlimited")
    lead_groups: tuple[str, ...] = key(
        "leadGroups", "list of strings", read_names, "JupyterHub groups whose members see "
        "the whole team's usage and costs on the usage page (admin guide, Costs and "
        "utilization); they need not be in `groups`.", default=(), words="none")

    @property
    def local_queue(self) -> str:
        return self.name

    @property
    def cluster_queue(self) -> str:
        return self.name


@dataclass(frozen=True)
class Priority:
    name: str = key("name", "DNS label", read_name(DNS_LABEL, "a DNS label (a-z, 0-9, -)"),
                    "WorkloadPriorityClass name.")
    value: int = key("value", "integer", read_int(-(2**31)), "Higher values preempt lower "
                     "ones.")
    description: str = key("description", "string", read_str, "Shown to admins.", default="")
    preemptible: bool = key("preemptible", "boolean", read_bool, "Notebooks at or below it "
                            "may be preempted by another team's higher-priority notebook "
                            "that must borrow too (see the bundle docs, Preemption); the "
                            "form marks them.", default=False)


@dataclass(frozen=True)
class CheckpointStorage:
    """Where checkpoints live: a ReadWriteMany PVC (e.g. backed by Azure Files)."""

    claim_name: str = key("claimName", "PVC name", read_name(DNS_LABEL, "a PVC name"),
                          "The PVC in every team namespace.")
    mount_path: str = key("mountPath", "path", read_str, "Where it is mounted.",
                          default="/home/jovyan/checkpoints")


@dataclass(frozen=True)
class Monitoring:
    """The thresholds of the bundle's Prometheus alerts (``config/prometheus-rules.yaml``)."""

    gpu_utilization_target_percent: float = key(
        "gpuUtilizationTarget", "percent", read_percent, "`JupyterhubGpuUtilizationUnderTarget` "
        "fires when a pool's notebooks used their GPUs less than this over an hour (the "
        "design's targets: 70 in production, 40 in dev).", default=70.0)
    queue_wait_p95_seconds: int = key(
        "queueWaitP95", "duration", q.parse_duration, "`JupyterhubGpuQueueWaitHigh` fires "
        "when a profile's 95th-percentile queue wait is over this.", default=300)
    spot_eviction_rate: float = key(
        "spotEvictionRate", "ratio 0-1", read_ratio, "`JupyterhubGpuSpotEvictionRateHigh` "
        "fires when more than this share of the servers started on a spot pool in a day "
        "were evicted (0.2: consider reserved capacity).", default=0.2)
    pool_at_max_seconds: int = key(
        "poolAtMaxFor", "duration", q.parse_duration, "`JupyterhubGpuPoolAtMaxNodes` fires "
        "when a pool has run maxNodes nodes for this long.", default=1800)
    idle_gpu_node_seconds: int = key(
        "idleGpuNodeFor", "duration", q.parse_duration, "`JupyterhubGpuNodeWithoutGpuPod` "
        "fires when a GPU node has had no GPU pod for this long.", default=900)


@dataclass(frozen=True)
class Platform:
    pools: tuple[Pool, ...] = key("pools", "list", None, "The AKS GPU node pools.")
    teams: tuple[Team, ...] = key("teams", "list", None, "Teams: groups, namespace, Kueue "
                                  "queue and quota.")
    priorities: tuple[Priority, ...] = key("priorities", "list", None, "Kueue "
                                           "WorkloadPriorityClasses.")
    profiles: tuple[Profile, ...] = key("profiles", "list", None, "What users choose on the "
                                        "spawn form.")
    checkpoint_storage: CheckpointStorage | None = key(
        "checkpointStorage", "mapping", None, "The ReadWriteMany PVC for checkpoints.",
        default=None)
    group_ids: Mapping[str, str] = key(
        "groupIds", "group name -> object ID", None, "Entra ID object IDs of the groups that "
        "`teams[].groups` and `allowedGroups` name, for tokens that carry IDs "
        "(`groupMembershipClaims=SecurityGroup`); the hub then names the users' groups by "
        "these names. With it, every group named needs one.",
        default_factory=lambda: MappingProxyType({}), words="none")
    cpu_idle_timeout_seconds: int = key(
        "cpuIdleTimeout", "duration", q.parse_duration, "The idle timeout of the profiles on "
        "CPU-only pools (`gpu: none`) that set no `idleTimeout` of their own: longer than a "
        "GPU profile's, since an idle CPU server costs little.", default=4 * 3600)
    gpu_servers_per_user: int = key(
        "gpuServersPerUser", "integer >= 0", read_int(0), "How many servers of GPU profiles "
        "one user may run at once (the hub allows named servers, so a user can run a CPU "
        "server beside them). A further GPU server is refused before anything is created; "
        "CPU servers never count.", default=1)
    job_profiles: tuple[JobProfile, ...] = key(
        "jobProfiles", "list", None, "The kinds of batch job users may submit: Kueue-queued "
        f"`{BATCH_API_VERSION}` Jobs in the team's namespace, on the same queues, quota and "
        "priorities as notebooks (admin guide, Job profiles).", default=(), words="none")
    gpu_kernels_per_user: int = key(
        "gpuKernelsPerUser", "integer >= 0", read_int(0), "How many GPU kernels (kernels of "
        "GPU profiles, started from a CPU server) one user may run at once, over all their "
        "servers and notebooks; they count apart from `gpuServersPerUser`. 0 switches GPU "
        "kernels off. GPU kernels are being built: `docs/kernels.md` says what works so far.",
        default=2)
    jobs_per_user: int = key("jobsPerUser", "integer >= 0", read_int(0), "How many of one "
                             "user's jobs may be queued or running at once.", default=2)
    registry: str = key(
        "registry", "string", read_name(ACR_NAME, "an Azure Container Registry name (a-z, "
                                        "0-9, 5 to 50)"),
        "The Azure Container Registry's name, e.g. `jupyterhubgpu`; the one place it is "
        "given: Terraform creates it, the z2jh values run the hub image from it, and a "
        f"profile without `image` runs the bundle's notebook image from it "
        f"(`<registry>{ACR_LOGIN_SUFFIX}/{NOTEBOOK_IMAGE}:<version>`).",
        default="jupyterhubgpu")
    monitoring: Monitoring = key("monitoring", "mapping", None, "Thresholds of the bundle's "
                                 "Prometheus alerts.", default=Monitoring(),
                                 words="the defaults below")

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
