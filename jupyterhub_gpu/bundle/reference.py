"""The generated configuration reference of the docs (``docs/reference/*.md``).

* The spec: the fields of every section are the parser's own
  (:data:`jupyterhub_gpu.spec.parse.FIELDS`), so a field added to
  :mod:`jupyterhub_gpu.spec.parse` and not described here fails a unit test; the valid
  GPU models, VM sizes and sharing modes come from :mod:`jupyterhub_gpu.spec.gpus`.
* The traits: ``GPUSpawner``'s own configurable traits with their ``help``, and the
  KubeSpawner traits a profile sets, with KubeSpawner's ``help``.

Pure: :func:`spec_reference` and :func:`traits_reference` return Markdown text.
"""

from __future__ import annotations

import inspect
from typing import Callable

from ..spec.allocatable import (EVICTION_MEMORY, MAX_PODS, kube_reserved_cpu_millis,
                                kube_reserved_memory)
from ..contract import (BATCH_API_VERSION, ENV_CHECKPOINT_DIR, ENV_MASTER_ADDR,
                        ENV_MASTER_PORT, ENV_POOL, ENV_RANK, ENV_WORLD_SIZE)
from ..spec.gpus import GPU_MODELS, VM_SIZES
from ..spec import sharing
from ..spec.parse import FIELDS as PARSER_FIELDS
from ..spec.parse import field_default
from ..spec.quantities import MAX_DURATION_DAYS, format_cpu, format_duration, format_memory
from ..spec.sharing import Parameter, modes_taking, modes_where
from ..spec.model import REQUIRED, Autoscaler, DaemonsetOverhead, default_of
from ..spec.validate import AKS_BOTH_AUTOSCALERS_FEATURE

_OVERHEAD = (f"{format_cpu(default_of(DaemonsetOverhead, 'cpu'))} cpu, "
             f"{format_memory(default_of(DaemonsetOverhead, 'memory_bytes'))}")

#: section -> title
SECTIONS: dict[str, str] = {
    "spec": "Top level",
    "pool": "`pools[]`: node pools (GPU, or CPU-only with `gpu: none`)",
    "sharing": "`pools[].sharing`",
    "daemonsetOverhead": "`pools[].daemonsetOverhead`",
    "team": "`teams[]`",
    "priority": "`priorities[]`",
    "profile": "`profiles[]`",
    "jobProfile": f"`jobProfiles[]`: kinds of batch job (Kueue-queued `{BATCH_API_VERSION}` "
                  "Jobs)",
    "checkpoint": "`profiles[].checkpoint`, `jobProfiles[].checkpoint`",
    "gpuIdle": "`profiles[].gpuIdle`",
    "checkpointStorage": "`checkpointStorage`",
    "monitoring": "`monitoring`: thresholds of the Prometheus alerts "
                  "(`config/prometheus-rules.yaml`)",
}

#: section -> field -> (type, description). The default comes from the spec's
#: dataclasses (:func:`jupyterhub_gpu.spec.parse.field_default`), or from :data:`WORDS`. A
#: description that names sharing modes is a function, read when the reference is made
#: (the registry may have grown).
FIELDS: dict[str, dict[str, tuple[str, str | Callable[[], str]]]] = {
    "spec": {
        "pools": ("list", "The AKS GPU node pools."),
        "teams": ("list", "Teams: groups, namespace, Kueue queue and quota."),
        "priorities": ("list", "Kueue WorkloadPriorityClasses."),
        "profiles": ("list", "What users choose on the spawn form."),
        "checkpointStorage": ("mapping", "The ReadWriteMany PVC for checkpoints."),
        "groupIds": ("group name -> object ID", "Entra ID object IDs of the groups "
                     "that `teams[].groups` and `allowedGroups` name, for tokens that carry "
                     "IDs (`groupMembershipClaims=SecurityGroup`); the hub then names the "
                     "users' groups by these names. With it, every group named needs one."),
        "cpuIdleTimeout": ("duration", "The idle timeout of the profiles on CPU-only pools "
                           "(`gpu: none`) that set no `idleTimeout` of their own: longer "
                           "than a GPU profile's, since an idle CPU server costs little."),
        "gpuServersPerUser": ("integer >= 0", "How many servers of GPU profiles one user "
                              "may run at once (the hub allows named servers, so a user "
                              "can run a CPU server beside them). A further GPU server is "
                              "refused before anything is created; CPU servers never "
                              "count."),
        "jobProfiles": ("list", "The kinds of batch job users may submit: Kueue-queued "
                        f"`{BATCH_API_VERSION}` Jobs in the team's namespace, on the same queues, quota "
                        "and priorities as notebooks (admin guide, Job profiles)."),
        "jobsPerUser": ("integer >= 0", "How many of one user's jobs may be queued or "
                        "running at once."),
        "monitoring": ("mapping", "Thresholds of the bundle's Prometheus alerts."),
    },
    "pool": {
        "name": ("string", "AKS agent pool (or Node Auto Provisioning NodePool) name: "
                 "a-z then a-z0-9, at most 12. Pods and Kueue's ResourceFlavor select it "
                 f"with `{Autoscaler.CLUSTER_AUTOSCALER.pool_label}`, or "
                 f"`{Autoscaler.NODE_AUTO_PROVISIONING.pool_label}` under Node Auto "
                 "Provisioning."),
        "vmSize": ("string", "Azure VM size, e.g. `Standard_NC24ads_A100_v4`."),
        "gpu": ("string", "GPU model; must match the VM size. `none`: a CPU-only pool "
                "(a VM size without GPUs), whose pods request no GPU and tolerate no GPU "
                "taint, and whose quota is counted in nodes."),
        "gpusPerNode": ("integer", "Required for GPU VM sizes not listed below; not on a "
                        "pool with `gpu: none`."),
        "sharing": ("mapping", "How one GPU is shared (see `sharing`); not on a pool "
                    "with `gpu: none`."),
        "spot": ("boolean", "An Azure Spot pool: cheaper, may be evicted."),
        "minNodes": ("integer", "Smallest size; 0 lets the pool scale to zero. The "
                     "dev cluster keeps this many static nodes. 0 under Node Auto "
                     "Provisioning (a NodePool has no minimum)."),
        "maxNodes": ("integer", "Largest size the autoscaler may reach: on AKS the node "
                     "pool's `max_count` or the NodePool's `limits.nodes`; in the dev "
                     "cluster its Karpenter NodePool's limit."),
        "pricePerNodeHour": ("number", "Price of one node-hour, for the spawn form."),
        "cpusPerNode": ("integer", "vCPUs of one node."),
        "memoryPerNode": ("quantity", "Memory of one node, e.g. `220Gi`; "
                          "for the tightest fit, the node's `capacity.memory`."),
        "consolidateAfter": (
            "duration or 0", "How long a node must have been empty (no notebook on it) "
            "before it is removed; `0s`: as soon as the autoscaler notices. The "
            "NodePools use it (the dev cluster's, and Node Auto Provisioning's). The "
            "cluster autoscaler has one `scale_down_unneeded` for all its pools: the "
            "shortest `consolidateAfter` among them, rounded up to whole minutes, at "
            "least 1m (AKS takes no less)."),
        "bootTime": (
            "duration or 0", "How long a new node takes to boot and join, e.g. `4m`; the "
            "dev cluster's Karpenter waits this long before a node it adds registers."),
        "daemonsetOverhead": ("mapping", "What the daemonsets request on each node (see "
                              "`daemonsetOverhead`)."),
        "autoscaler": ("string", lambda: (
            f"What scales the pool on AKS: `{Autoscaler.CLUSTER_AUTOSCALER}` (an AKS node "
            f"pool of the cluster autoscaler) or `{Autoscaler.NODE_AUTO_PROVISIONING}` (a "
            f"Karpenter NodePool of AKS Node Auto Provisioning; for "
            f"{modes_where(lambda m: m.vm_resource)} pools or CPU-only ones, with "
            f"`minNodes: 0`). Both "
            f"in one cluster need the subscription feature `{AKS_BOTH_AUTOSCALERS_FEATURE}` "
            "(see the Terraform docs). The dev cluster runs Karpenter for every pool "
            "either way.")),
    },
    "daemonsetOverhead": {
        "cpu": ("cpu quantity or 0", "CPU the node's daemonset pods request "
                "(CNI, CSI drivers, monitoring agent, GPU Operator)."),
        "memory": ("quantity or 0", "Memory they request. Each profile's "
                   "share of the node must fit in the allocatable less this."),
    },
    "sharing": {
        "mode": ("string", "One of the sharing modes listed below."),
        "migProfile": ("string", "MIG instance profile, e.g. `3g.40gb`."),
        "replicas": ("integer >= 2", "Shares per GPU."),
    },
    "team": {
        "name": ("DNS label", "Also the name of its ClusterQueue and LocalQueue."),
        "groups": ("list of strings", "JupyterHub groups whose members belong to "
                   "the team (the first matching team wins)."),
        "namespace": ("namespace name", "Where the team's user pods run."),
        "quota": ("pool -> integer", "Nominal quota per pool, in the pool's GPU "
                  "units (GPUs, MIG slices or shares); on a CPU-only pool in nodes (a "
                  "node's cpu and memory, less what AKS and the daemonsets keep)."),
        "cohort": ("DNS label", "Kueue cohort: teams in one cohort "
                   "borrow each other's unused quota."),
        "borrowingLimit": ("pool -> integer", "Most units borrowed per pool."),
        "lendingLimit": ("pool -> integer", "Most units lent per pool."),
        "leadGroups": ("list of strings", "JupyterHub groups whose members see the whole "
                       "team's usage and costs on the usage page (admin guide, Costs and "
                       "utilization); they need not be in `groups`."),
    },
    "priority": {
        "name": ("DNS label", "WorkloadPriorityClass name."),
        "value": ("integer", "Higher values preempt lower ones."),
        "description": ("string", "Shown to admins."),
        "preemptible": ("boolean", "Notebooks at or below it may be preempted "
                        "by another team's higher-priority notebook that must borrow too "
                        "(see the bundle docs, Preemption); the form marks them."),
    },
    "profile": {
        "slug": ("DNS label", "The form value and the pod's profile label."),
        "displayName": ("string", "Title on the spawn form."),
        "description": ("string", "Text on the spawn form."),
        "pool": ("pool name", "The pool the server runs on; or give `pools`."),
        "pools": ("list of pool names", "Instead of `pool`: a fallback profile's pools in "
                  "order of preference, e.g. `[a100spot, a100]`; the server runs on the "
                  "first with room (Kueue's flavor fungibility). All must offer the same "
                  "GPU resource in the same sharing mode (no CPU-only pool), the profile "
                  "must fit a node of each, and no two profiles may prefer two pools the "
                  "other way round. The form shows the price range; "
                  f"`{ENV_POOL}` tells the notebook which pool it got."),
        "gpus": ("integer", "Units of the pool's GPU resource (1 on shared pools); not on "
                 "a CPU-only pool, where the server asks for no GPU."),
        "cpu": ("cpu quantity", "CPU guarantee and limit, e.g. `8` or `500m`. "
                "The pool's units per node times this, divided by `gpus`, must fit one "
                "node's allocatable less `daemonsetOverhead`."),
        "memory": ("quantity", "Memory guarantee and limit, e.g. `96Gi`; must "
                   "fit the node like `cpu`."),
        "image": ("string", "Notebook image."),
        "priority": ("priority name", "The Kueue priority of the server."),
        "idleTimeout": ("duration", "Idle time before the culler stops the server; on a "
                        "CPU-only pool the default is the spec's `cpuIdleTimeout`."),
        "maxAge": ("duration", "Age at which the culler stops the server."),
        "queuePatience": ("duration", "How long a user waits in the Kueue queue."),
        "startTimeout": ("duration", "From admission to a running server."),
        "gpuIdle": ("mapping", "Cull on low GPU use (see `gpuIdle`); not on a CPU-only "
                    "pool."),
        "allowedGroups": ("list of strings", "Groups that may use it."),
        "checkpoint": ("mapping", "Checkpoint storage and grace period. Without it the "
                       "profile mounts no checkpoint PVC and its pods keep Kubernetes' "
                       "30s grace period; a `checkpoint` block turns both on unless it "
                       "says `enabled: false`."),
        "default": ("boolean", "Preselected on the form."),
    },
    "jobProfile": {
        "slug": ("DNS label", "The name users submit a job with."),
        "displayName": ("string", "Title in job listings."),
        "description": ("string", "What the job profile is for."),
        "pool": ("pool name", "The pool the job's pods run on; or give `pools`."),
        "pools": ("list of pool names", "Instead of `pool`: pools in order of preference, "
                  "validated as a fallback profile's (same GPU resource and sharing mode, "
                  "the pod fits a node of each, one order for all profiles)."),
        "gpus": ("integer", "Units of the pool's GPU resource per pod; not on a CPU-only "
                 "pool, where the pods ask for no GPU."),
        "pods": ("integer >= 1", "Pods of one job. More than 1: an Indexed Job whose pods "
                 f"get PyTorch DDP's rendezvous environment (`{ENV_MASTER_ADDR}`, "
                 f"`{ENV_MASTER_PORT}`, `{ENV_WORLD_SIZE}`, `{ENV_RANK}`), admitted by "
                 "Kueue all at once."),
        "cpu": ("cpu quantity", "CPU guarantee and limit per pod; must fit the pool's node "
                "as a notebook profile's `cpu` does."),
        "memory": ("quantity", "Memory guarantee and limit per pod; must fit the node."),
        "image": ("string", "The job's image; empty: the image of the user's running "
                  "server."),
        "priority": ("priority name", "The Kueue priority of the job."),
        "maxRunTime": ("duration", "The Job's `activeDeadlineSeconds`: it fails once it "
                       "has run this long, retries and restarts included."),
        "retries": ("integer >= 0", "How often a crashed pod (a non-zero exit) is started "
                    "again (the Job's `backoffLimit`). A disruption (spot eviction, "
                    "preemption, a node going away) never counts against it."),
        "checkpoint": ("mapping", "As a notebook profile's: the checkpoint PVC at the same "
                       f"per-user path, `{ENV_CHECKPOINT_DIR}`, and the grace period."),
        "allowedGroups": ("list of strings", "Groups that may submit it."),
    },
    "checkpoint": {
        "enabled": ("boolean", "Mount the checkpoint PVC (per-user subPath) and set the "
                    "grace period."),
        "gracePeriod": ("duration", "terminationGracePeriodSeconds; at most 30s on "
                        "spot pools (Azure's eviction notice)."),
    },
    "gpuIdle": {
        "threshold": ("percent", "GPU utilisation below which the GPU is idle."),
        "window": ("duration", "How long it must stay idle."),
    },
    "checkpointStorage": {
        "claimName": ("PVC name", "The PVC in every team namespace."),
        "mountPath": ("path", "Where it is mounted."),
    },
    "monitoring": {
        "gpuUtilizationTarget": ("percent", "`JupyterhubGpuUtilizationUnderTarget` fires "
                                 "when a pool's notebooks used their GPUs less than this "
                                 "over an hour (the design's targets: 70 in production, "
                                 "40 in dev)."),
        "queueWaitP95": ("duration", "`JupyterhubGpuQueueWaitHigh` fires when a profile's "
                         "95th-percentile queue wait is over this."),
        "spotEvictionRate": ("ratio 0-1", "`JupyterhubGpuSpotEvictionRateHigh` fires when "
                             "more than this share of the servers started on a spot pool "
                             "in a day were evicted (0.2: consider reserved capacity)."),
        "poolAtMaxFor": ("duration", "`JupyterhubGpuPoolAtMaxNodes` fires when a pool has "
                         "run maxNodes nodes for this long."),
        "idleGpuNodeFor": ("duration", "`JupyterhubGpuNodeWithoutGpuPod` fires when a GPU "
                           "node has had no GPU pod for this long."),
    },
}


#: What a default means where it is no value to print: derived, empty or a block.
#: Each stands for its dataclass field's default (a test checks that it has no plain
#: value this would hide); a sharing parameter's default names the modes taking it.
WORDS: dict[tuple[str, str], str | Parameter] = {
    ("spec", "groupIds"): "none",
    ("pool", "gpusPerNode"): "from vmSize",
    ("pool", "cpusPerNode"): "from vmSize",
    ("pool", "memoryPerNode"): "from vmSize",
    ("pool", "daemonsetOverhead"): _OVERHEAD,
    ("sharing", "migProfile"): Parameter.MIG_PROFILE,
    ("sharing", "replicas"): Parameter.REPLICAS,
    ("team", "borrowingLimit"): "unlimited",
    ("team", "lendingLimit"): "unlimited",
    ("team", "leadGroups"): "none",
    ("profile", "allowedGroups"): "every team member",
    ("profile", "pools"): "`pool` only",
    ("profile", "checkpoint"): "off",
    ("spec", "jobProfiles"): "none",
    ("spec", "monitoring"): "the defaults below",
    ("jobProfile", "allowedGroups"): "every team member",
    ("jobProfile", "pools"): "`pool` only",
    ("jobProfile", "checkpoint"): "off",
}

#: How a default of a field of each type is written.
_FORMATS = {"duration": format_duration, "duration or 0": format_duration,
            "cpu quantity or 0": format_cpu,
            "quantity or 0": format_memory}


def default_text(section: str, name: str) -> str:
    """The default of field ``name`` of ``section``, as the reference writes it."""
    words = WORDS.get((section, name))
    if isinstance(words, Parameter):
        return f"{modes_taking(words)} only"
    if words is not None:
        return words
    value, kind = field_default(section, name), FIELDS[section][name][0]
    if value is REQUIRED:
        return "required"
    if value is None or isinstance(value, bool):
        return str(value).lower()
    if kind in _FORMATS:
        return _FORMATS[kind](value)
    if isinstance(value, str):
        return f"`{value}`" if value else "empty"
    if isinstance(value, (int, float)):
        return f"{value:g}"
    raise ValueError(f"{section}.{name}: say in WORDS what the default {value!r} means")


def _description(section: str, name: str) -> str:
    text = FIELDS[section][name][1]
    return text if isinstance(text, str) else text()


def allowed_fields(section: str) -> list[str]:
    """The fields the parser accepts in ``section``, in its order."""
    return list(PARSER_FIELDS[section])


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _facts() -> str:
    gpus = [(f"`{g.name}`", g.product, ", ".join(p.name for p in g.mig) or "none")
            for g in GPU_MODELS.values()]
    vms = [(f"`{v.name}`", str(v.gpus), v.gpu, str(v.cpus), f"{v.memory_gib}Gi",
            *_allocatable(v.cpus, v.memory_gib * 2**30)) for v in VM_SIZES.values()]
    return ("## Known GPU models\n\n" + _table(gpus, ("gpu", "product label", "MIG profiles"))
            + "\n## Known VM sizes\n\n" + ALLOCATABLE_NOTE
            + _table(vms, ("vmSize", "GPUs", "gpu", "vCPUs", "memory", "allocatable cpu",
                           "allocatable memory"))
            + "\n## Sharing modes\n\n" + _sharing_modes())


def _sharing_modes() -> str:
    """The registered modes (:mod:`jupyterhub_gpu.spec.sharing`), in the words users see."""
    example = {"mig_profile": "<migProfile>", "replicas": "<replicas>"}
    rows = [(f"`{m.name}`", m.summary, m.unit, f"`{m.resource.format(**example)}`",
             f"`{m.form_words.format(**example)}`",
             f"`{m.parameter}`" if m.parameter else "none") for m in sharing.MODES.values()]
    return _table(rows, ("mode", "what it is", "unit", "resource", "on the form", "also set"))


ALLOCATABLE_NOTE = (
    "*Allocatable* is what AKS's kubelet reports on such a node: the vCPUs less AKS's "
    "kube-reserved CPU, and the memory less kube-reserved memory (for "
    f"maxPods {MAX_PODS}) and the {format_memory(EVICTION_MEMORY)} eviction threshold, "
    "by AKS's rules for AKS 1.29 and later ([node resource reservations]"
    "(https://learn.microsoft.com/azure/aks/node-resource-reservations); "
    "`jupyterhub_gpu.spec.allocatable` explains them). Notebooks share it less the pool's "
    "`daemonsetOverhead`.\n\n")


def _allocatable(cpus: int, memory: int) -> tuple[str, str]:
    """(cpu, memory) allocatable, as cores and GiB rounded down to 0.01 and 0.1."""
    cpu = (cpus * 1000 - kube_reserved_cpu_millis(cpus)) // 10 / 100
    left = memory - kube_reserved_memory(memory) - EVICTION_MEMORY
    return f"{cpu:g}", f"{left * 10 // 2**30 / 10:g}Gi"


def spec_reference() -> str:
    out = ["# Platform spec reference\n",
           "Generated from the parser (`jupyterhub_gpu.spec.parse`) by "
           "`jupyterhub_gpu.bundle.reference`; do not edit. Durations are like `90s`, "
           f"`30m`, `8h` or `1h30m`, at most {MAX_DURATION_DAYS} days; quantities like "
           "`12Gi`. Validate a spec with `jupyterhub-gpu validate SPEC`.\n"]
    for section, title in SECTIONS.items():
        rows = [(f"`{name}`", FIELDS[section][name][0], default_text(section, name),
                 _description(section, name)) for name in allowed_fields(section)]
        out.append(f"## {title}\n\n" + _table(rows, ("field", "type", "default", "meaning")))
    out.append(_facts())
    return "\n".join(out)


def _help(trait) -> str:
    return inspect.cleandoc(trait.help or "").strip() or "(no help)"


def traits_reference() -> str:
    from ..builders.pod import SpawnSettings
    from ..hub.spawner import GPUSpawner

    out = ["# GPUSpawner traits\n",
           "Generated from the traits' `help` by `jupyterhub_gpu.bundle.reference`; do "
           "not edit. Set them in `jupyterhub_config.py` (`c.GPUSpawner.<name>`) or, with "
           "the z2jh chart, under `hub.config.GPUSpawner`.\n",
           "## Traits GPUSpawner adds\n"]
    own = GPUSpawner.class_own_traits(config=True)
    for name in sorted(own):
        trait = own[name]
        out.append(f"### `{name}`\n\nType `{type(trait).__name__}`, default "
                   f"`{trait.default()!r}`.\n\n```text\n{_help(trait)}\n```\n")
    out.append("## KubeSpawner traits a profile sets\n\nOn every spawn GPUSpawner first "
               "restores these to the values you configured, then applies the profile: "
               "dicts are merged (the profile wins), lists appended to, other values "
               "replaced.\n")
    traits = GPUSpawner.class_traits()
    for name in SpawnSettings.trait_names():
        first = _help(traits[name]).split("\n\n")[0]
        out.append(f"### `{name}`\n\n```text\n{first}\n```\n")
    out.append(_changed_defaults(GPUSpawner))
    out.append(_usage_ledger_traits())
    return "\n".join(out)


def _changed_defaults(spawner_class: type) -> str:
    """The KubeSpawner settings whose default GPUSpawner changes when it has a spec
    (each ``@spec_default`` with a docstring, which says why)."""
    from kubespawner import KubeSpawner
    from traitlets.traitlets import DefaultHandler

    kube = KubeSpawner.class_traits(config=True)
    out = ["## KubeSpawner defaults GPUSpawner changes\n\nWith a spec only (without one "
           "GPUSpawner is KubeSpawner); a value you configure wins.\n"]
    for handler in vars(spawner_class).values():
        name = getattr(handler, "trait_name", None)
        if isinstance(handler, DefaultHandler) and name in kube and handler.func.__doc__:
            value = handler.func.__wrapped__(None)
            out.append(f"### `{name}`\n\nDefault `{value!r}` (KubeSpawner's: "
                       f"`{kube[name].default()!r}`). {_one_line(handler.func.__doc__)}\n")
    return "\n".join(out)


def _usage_ledger_traits() -> str:
    """The usage ledger's setting (``c.UsageLedger``), shared by the hub and the jobs service."""
    from ..usage.config import UsageLedger

    from ..usage.config import UsagePage

    trait = UsageLedger.class_traits()["db_url"]
    out = ["## The usage ledger (`c.UsageLedger`)\n\n### `db_url`\n\nType `Unicode`, "
           f"default: SQLite in the hub's working directory.\n\n```text\n{_help(trait)}\n```\n",
           "## The usage page (`c.UsagePage`)\n\nRead by `add_usage_service` "
           "(admin guide, Costs and utilization).\n"]
    for name, trait in sorted(UsagePage.class_own_traits(config=True).items()):
        out.append(f"### `{name}`\n\nType `{type(trait).__name__}`, default "
                   f"`{trait.default()!r}`.\n\n```text\n{_help(trait)}\n```\n")
    return "\n".join(out)


def _one_line(text: str) -> str:
    return " ".join(text.split())
