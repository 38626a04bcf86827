"""The generated configuration reference of the docs (``docs/reference/*.md``).

* The spec: the fields of every section are the parser's own
  (:data:`jupyterhub_gpu.parse.FIELDS`), so a field added to
  :mod:`jupyterhub_gpu.parse` and not described here fails a unit test; the valid
  GPU models, VM sizes and sharing modes come from :mod:`jupyterhub_gpu.gpus`.
* The traits: ``GPUSpawner``'s own configurable traits with their ``help``, and the
  KubeSpawner traits a profile sets, with KubeSpawner's ``help``.

Pure: :func:`spec_reference` and :func:`traits_reference` return Markdown text.
"""

from __future__ import annotations

import inspect

from ..allocatable import (EVICTION_MEMORY, MAX_PODS, kube_reserved_cpu_millis,
                           kube_reserved_memory)
from ..contract import AGENTPOOL_LABEL
from ..gpus import GPU_MODELS, VM_SIZES
from ..parse import FIELDS as PARSER_FIELDS
from ..quantities import format_cpu, format_memory
from .. import sharing
from ..sharing import Parameter, modes_taking
from ..spec import DaemonsetOverhead

_OVERHEAD_CPU = format_cpu(DaemonsetOverhead().cpu)
_OVERHEAD_MEMORY = format_memory(DaemonsetOverhead().memory_bytes)

#: section -> title
SECTIONS: dict[str, str] = {
    "spec": "Top level",
    "pool": "`pools[]`: GPU node pools",
    "sharing": "`pools[].sharing`",
    "daemonsetOverhead": "`pools[].daemonsetOverhead`",
    "team": "`teams[]`",
    "priority": "`priorities[]`",
    "profile": "`profiles[]`",
    "checkpoint": "`profiles[].checkpoint`",
    "gpuIdle": "`profiles[].gpuIdle`",
    "checkpointStorage": "`checkpointStorage`",
}

REQUIRED = "required"
#: section -> field -> (type, default, description)
FIELDS: dict[str, dict[str, tuple[str, str, str]]] = {
    "spec": {
        "pools": ("list", REQUIRED, "The AKS GPU node pools."),
        "teams": ("list", REQUIRED, "Teams: groups, namespace, Kueue queue and quota."),
        "priorities": ("list", REQUIRED, "Kueue WorkloadPriorityClasses."),
        "profiles": ("list", REQUIRED, "What users choose on the spawn form."),
        "checkpointStorage": ("mapping", "none", "The ReadWriteMany PVC for checkpoints."),
        "groupIds": ("group name -> object ID", "none", "Entra ID object IDs of the groups "
                     "that `teams[].groups` and `allowedGroups` name, for tokens that carry "
                     "IDs (`groupMembershipClaims=SecurityGroup`); the hub then names the "
                     "users' groups by these names. With it, every group named needs one."),
    },
    "pool": {
        "name": ("string", REQUIRED, "AKS agent pool name: a-z then a-z0-9, at most 12. "
                 f"Pods select it with `{AGENTPOOL_LABEL}`."),
        "vmSize": ("string", REQUIRED, "Azure VM size, e.g. `Standard_NC24ads_A100_v4`."),
        "gpu": ("string", REQUIRED, "GPU model; must match the VM size."),
        "gpusPerNode": ("integer", "from vmSize", "Required for VM sizes not listed below."),
        "sharing": ("mapping", REQUIRED, "How one GPU is shared (see `sharing`)."),
        "spot": ("boolean", "false", "An Azure Spot pool: cheaper, may be evicted."),
        "minNodes": ("integer", "0", "Smallest size; 0 lets the pool scale to zero."),
        "maxNodes": ("integer", "1", "Largest size the cluster autoscaler may reach."),
        "pricePerNodeHour": ("number", "0", "Price of one node-hour, for the spawn form."),
        "cpusPerNode": ("integer", "from vmSize", "vCPUs of one node."),
        "memoryPerNode": ("quantity", "from vmSize", "Memory of one node, e.g. `220Gi`; "
                          "for the tightest fit, the node's `capacity.memory`."),
        "daemonsetOverhead": ("mapping", f"{_OVERHEAD_CPU} cpu, {_OVERHEAD_MEMORY}",
                              "What the daemonsets request on each node (see "
                              "`daemonsetOverhead`)."),
    },
    "daemonsetOverhead": {
        "cpu": ("cpu quantity or 0", _OVERHEAD_CPU, "CPU the node's daemonset pods request "
                "(CNI, CSI drivers, monitoring agent, GPU Operator)."),
        "memory": ("quantity or 0", _OVERHEAD_MEMORY, "Memory they request. Each profile's "
                   "share of the node must fit in the allocatable less this."),
    },
    "sharing": {
        "mode": ("string", REQUIRED, "One of the sharing modes listed below."),
        "migProfile": ("string", Parameter.MIG_PROFILE,
                       "MIG instance profile, e.g. `3g.40gb`."),
        "replicas": ("integer >= 2", Parameter.REPLICAS, "Shares per GPU."),
    },
    "team": {
        "name": ("DNS label", REQUIRED, "Also the name of its ClusterQueue and LocalQueue."),
        "groups": ("list of strings", REQUIRED, "JupyterHub groups whose members belong to "
                   "the team (the first matching team wins)."),
        "namespace": ("namespace name", REQUIRED, "Where the team's user pods run."),
        "quota": ("pool -> integer", REQUIRED, "Nominal quota per pool, in the pool's GPU "
                  "units (GPUs, MIG slices or shares)."),
        "cohort": ("DNS label", "`jupyterhub-gpu`", "Kueue cohort: teams in one cohort "
                   "borrow each other's unused quota."),
        "borrowingLimit": ("pool -> integer", "unlimited", "Most units borrowed per pool."),
        "lendingLimit": ("pool -> integer", "unlimited", "Most units lent per pool."),
        "fairShareWeight": ("integer", "Kueue's (1)", "Fair-sharing weight of the team."),
    },
    "priority": {
        "name": ("DNS label", REQUIRED, "WorkloadPriorityClass name."),
        "value": ("integer", REQUIRED, "Higher values preempt lower ones."),
        "description": ("string", "empty", "Shown to admins."),
        "preemptible": ("boolean", "false", "Workloads at or below it may be preempted "
                        "when another team reclaims borrowed quota."),
    },
    "profile": {
        "slug": ("DNS label", REQUIRED, "The form value and the pod's profile label."),
        "displayName": ("string", REQUIRED, "Title on the spawn form."),
        "description": ("string", "empty", "Text on the spawn form."),
        "pool": ("pool name", REQUIRED, "The pool the server runs on."),
        "gpus": ("integer", "1", "Units of the pool's GPU resource (1 on shared pools)."),
        "cpu": ("cpu quantity", REQUIRED, "CPU guarantee and limit, e.g. `8` or `500m`. "
                "The pool's units per node times this, divided by `gpus`, must fit one "
                "node's allocatable less `daemonsetOverhead`."),
        "memory": ("quantity", REQUIRED, "Memory guarantee and limit, e.g. `96Gi`; must "
                   "fit the node like `cpu`."),
        "image": ("string", REQUIRED, "Notebook image."),
        "priority": ("priority name", REQUIRED, "The Kueue priority of the server."),
        "idleTimeout": ("duration", "30m", "Idle time before the culler stops the server."),
        "maxAge": ("duration", "none", "Age at which the culler stops the server."),
        "queuePatience": ("duration", "10m", "How long a user waits in the Kueue queue."),
        "startTimeout": ("duration", "5m", "From admission to a running server."),
        "gpuIdle": ("mapping", "none", "Cull on low GPU use (see `gpuIdle`)."),
        "allowedGroups": ("list of strings", "every team member", "Groups that may use it."),
        "checkpoint": ("mapping", "off", "Checkpoint storage and grace period."),
        "default": ("boolean", "false", "Preselected on the form."),
    },
    "checkpoint": {
        "enabled": ("boolean", "true", "Mount the checkpoint PVC (per-user subPath)."),
        "gracePeriod": ("duration", "30s", "terminationGracePeriodSeconds; at most 30s on "
                        "spot pools (Azure's eviction notice)."),
    },
    "gpuIdle": {
        "threshold": ("percent", REQUIRED, "GPU utilisation below which the GPU is idle."),
        "window": ("duration", REQUIRED, "How long it must stay idle."),
    },
    "checkpointStorage": {
        "claimName": ("PVC name", REQUIRED, "The PVC in every team namespace."),
        "mountPath": ("path", "`/home/jovyan/checkpoints`", "Where it is mounted."),
    },
}


def _described(row: tuple) -> tuple[str, str, str]:
    """A row of :data:`FIELDS`; a :class:`~jupyterhub_gpu.sharing.Parameter` default
    names the modes that take it."""
    kind, default, meaning = row
    if isinstance(default, Parameter):
        default = f"{modes_taking(default)} only"
    return kind, default, meaning


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
    """The registered modes (:mod:`jupyterhub_gpu.sharing`), in the words users see."""
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
    "`jupyterhub_gpu.allocatable` explains them). Notebooks share it less the pool's "
    "`daemonsetOverhead`.\n\n")


def _allocatable(cpus: int, memory: int) -> tuple[str, str]:
    """(cpu, memory) allocatable, as cores and GiB rounded down to 0.01 and 0.1."""
    cpu = (cpus * 1000 - kube_reserved_cpu_millis(cpus)) // 10 / 100
    left = memory - kube_reserved_memory(memory) - EVICTION_MEMORY
    return f"{cpu:g}", f"{left * 10 // 2**30 / 10:g}Gi"


def spec_reference() -> str:
    out = ["# Platform spec reference\n",
           "Generated from the parser (`jupyterhub_gpu.parse`) by "
           "`jupyterhub_gpu.bundle.reference`; do not edit. Durations are like `90s`, "
           "`30m`, `8h` or `1h30m`; quantities like `12Gi`. Validate a spec with "
           "`jupyterhub-gpu validate SPEC`.\n"]
    for section, title in SECTIONS.items():
        rows = [(f"`{name}`", *_described(FIELDS[section][name]))
                for name in allowed_fields(section)]
        out.append(f"## {title}\n\n" + _table(rows, ("field", "type", "default", "meaning")))
    out.append(_facts())
    return "\n".join(out)


def _help(trait) -> str:
    return inspect.cleandoc(trait.help or "").strip() or "(no help)"


def traits_reference() -> str:
    from ..builders.pod import SpawnSettings
    from ..spawner import GPUSpawner

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
    return "\n".join(out)
