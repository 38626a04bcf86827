"""The generated configuration reference of the docs (``docs/reference/*.md``).

* The spec: every section's fields with their type, default and description, as the
  spec's dataclasses declare them (:func:`jupyterhub_gpu.spec.keys.key`), in the order
  the parser accepts them (:data:`jupyterhub_gpu.spec.fields.KEYS`); the valid GPU
  models, VM sizes and sharing modes come from :mod:`jupyterhub_gpu.spec.gpus`.
* The traits: ``GPUSpawner``'s own configurable traits with their ``help``, and the
  KubeSpawner traits a profile sets, with KubeSpawner's ``help``.

Pure: :func:`spec_reference` and :func:`traits_reference` return Markdown text.
"""

from __future__ import annotations

import inspect

from ..spec.allocatable import (EVICTION_MEMORY, MAX_PODS, kube_reserved_cpu_millis,
                                kube_reserved_memory)
from ..contract import BATCH_API_VERSION, GPU_PRODUCT_LABEL
from ..spec.gpus import GPU_MODELS, VM_SIZES
from ..spec import sharing
from ..spec.fields import KEYS, field_default
from ..spec.keys import REQUIRED, Key
from ..spec.quantities import MAX_DURATION_DAYS, format_cpu, format_duration, format_memory
from ..spec.sharing import Parameter, modes_taking

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

#: How a default of a field of each type is written.
_FORMATS = {"duration": format_duration, "duration or 0": format_duration,
            "cpu quantity or 0": format_cpu,
            "quantity or 0": format_memory}


def spec_key(section: str, name: str) -> Key:
    """What the dataclass of ``section`` declares about its field ``name``."""
    return KEYS[section][name][1]


def default_text(section: str, name: str) -> str:
    """The default of field ``name`` of ``section``, as the reference writes it: its
    declared words, else its dataclass field's default."""
    words, kind = spec_key(section, name).words, spec_key(section, name).kind
    if isinstance(words, Parameter):
        return f"{modes_taking(words)} only"
    if words is not None:
        return words
    value = field_default(section, name)
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
    raise ValueError(f"{section}.{name}: declare with words= what the default {value!r} "
                     "means")


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
             f"`<product>{m.product_suffix.format(**example)}`" if m.gpu else "",
             f"`{m.form_words.format(**example)}`",
             f"`{m.parameter}`" if m.parameter else "none") for m in sharing.MODES.values()]
    return _table(rows, ("mode", "what it is", "unit", "resource", GPU_PRODUCT_LABEL,
                         "on the form", "also set"))


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
        rows = [(f"`{name}`", spec.kind, default_text(section, name), spec.description)
                for name, (_, spec) in KEYS[section].items()]
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
    """The usage ledger's setting (``c.UsageLedger``), shared by the hub and its services."""
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
