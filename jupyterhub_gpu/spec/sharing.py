"""The sharing modes: one record per way a pool's GPUs are handed out.

A :class:`SharingMode` holds everything the package knows about one mode -- the
resource name the NVIDIA device plugin advertises, the units per GPU, the words for a
unit on the spawn form, in the queue messages and in the docs, the device-plugin config
block, the labels GPU feature discovery and the MIG manager see, and the rules the spec
must follow (which field a pool must set, whether a pod may ask for more than one
unit). Every other module reads these records; none of them names a mode.

Adding a mode means one more :func:`register` call here (plus its tests). A record
lacking a field fails when this module is imported, and a template naming a value no
pool has fails in :func:`register`, so a broken mode stops the hub at start-up, never a
spawn. Templates are formatted with a pool's ``mig_profile`` and ``replicas``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..contract import GPU_RESOURCE, MIG_STRATEGY_MIXED

if TYPE_CHECKING:
    from .gpus import GpuModel
    from .model import Sharing


class Parameter(StrEnum):
    """A field of ``pools[].sharing`` that some modes require (and the rest refuse)."""

    MIG_PROFILE = "migProfile"
    REPLICAS = "replicas"


#: The names a template may use, with a value of the right type for checking it.
TEMPLATE_FIELDS: Mapping[str, Any] = MappingProxyType({"mig_profile": "1g.10gb", "replicas": 2})


@dataclass(frozen=True, eq=False)
class SharingMode:
    """One sharing mode. ``str()`` is its name in the spec."""

    name: str  # pools[].sharing.mode
    summary: str  # one line for the docs
    parameter: Parameter | None  # the field its pools must set
    shared: bool  # pods share each GPU: one unit per pod, the GPU's memory and usage shared
    resource: str  # template: the extended resource the device plugin advertises
    unit: str  # a unit, counted in messages: "3 MIG slices"
    unit_phrase: str  # template: a unit in the queue messages ("an A100-80GB MIG ...")
    form_words: str  # template: what one unit is, on the spawn form
    plugin_config: str  # template: the pool's key in the device-plugin ConfigMap
    mig_strategy: str  # the device plugin's migStrategy flag
    mig_layout: str  # template: the MIG manager's nvidia.com/mig.config label
    sharing_strategy: str  # GPU feature discovery's nvidia.com/gpu.sharing-strategy
    #: template: what GPU feature discovery appends to nvidia.com/gpu.product
    product_suffix: str = ""
    sharing_key: str | None = None  # the device plugin's sharing block (its key under sharing)
    sharing_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: the pool's nodes have GPUs: its pods request ``resource`` and tolerate the GPU
    #: taint, and the device plugin runs there. False for a pool with ``gpu: none``,
    #: whose unit of quota is one node's cpu and memory.
    gpu: bool = True

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def _fill(template: str, sharing: Sharing) -> str:
        return template.format(mig_profile=sharing.mig_profile, replicas=sharing.replicas)

    @property
    def partitioned(self) -> bool:
        """Each unit is a MIG instance (a GPU's own partition, with its own metrics)."""
        return self.parameter is Parameter.MIG_PROFILE

    @property
    def whole_gpus(self) -> bool:
        """Each unit is one GPU: the device plugin's plain config."""
        return (self.gpu and self.parameter is None and self.sharing_key is None
                and not self.shared)

    @property
    def vm_resource(self) -> bool:
        """Each unit is one of the VM's own GPUs: what an autoscaler knowing only the
        VM size expects a new node to offer as ``nvidia.com/gpu``. AKS Node Auto
        Provisioning is one: Azure/karpenter-provider-azure gives an instance type the
        VM's count of ``nvidia.com/gpu`` (and ``amd.com/gpu``) and no other GPU resource
        (``computeCapacity``, pkg/providers/instancetype/instancetype.go), and never
        partitions MIG (``MIGNode: false``, pkg/providers/imagefamily/bootstrap/
        staticvalues.go; "GpuInstanceProfile ... Unsupported as of now (MIG)",
        pkg/providers/imagefamily/customscriptsbootstrap/provisionclientbootstrap.go).
        A shared or MIG pool's nodes advertise ``nvidia.com/gpu`` too, but more of it
        than the VM has GPUs."""
        return self.gpu and self.parameter is None

    @property
    def advertises_gpu_resource(self) -> bool:
        """The pool's nodes advertise ``nvidia.com/gpu``, as the cluster autoscaler
        requires of every node AKS labels a GPU node (see
        :mod:`jupyterhub_gpu.spec.validate`): no renamed resource (the device plugin's
        ``renameByDefault``) and no MIG resource of the mixed strategy."""
        return self.resource == GPU_RESOURCE and self.mig_strategy != MIG_STRATEGY_MIXED

    def resource_name(self, sharing: Sharing) -> str:
        return self._fill(self.resource, sharing)

    def message_unit(self, sharing: Sharing) -> str:
        return self._fill(self.unit_phrase, sharing)

    def form_label(self, sharing: Sharing) -> str:
        return self._fill(self.form_words, sharing)

    def config_name(self, sharing: Sharing) -> str:
        return self._fill(self.plugin_config, sharing)

    def mig_config(self, sharing: Sharing) -> str:
        return self._fill(self.mig_layout, sharing)

    def product_label(self, sharing: Sharing, product: str) -> str:
        """GPU feature discovery's ``nvidia.com/gpu.product`` for a GPU of ``product``."""
        return product + self._fill(self.product_suffix, sharing)

    def units_per_node(self, sharing: Sharing, gpu: GpuModel, gpus_per_node: int) -> int:
        """A node's units of quota: its GPUs' units, or (no GPU) the node itself."""
        if not self.gpu:
            return 1
        return self.units_per_gpu(sharing, gpu) * gpus_per_node

    def units_per_gpu(self, sharing: Sharing, gpu: GpuModel) -> int:
        if self.parameter is Parameter.MIG_PROFILE:
            mig = gpu.mig_profile(sharing.mig_profile or "")
            return mig.per_gpu if mig else 1
        if self.parameter is Parameter.REPLICAS:
            return sharing.replicas
        return 1


#: Every mode, by name. Read it at call time (a test may stand in a copy).
MODES: dict[str, SharingMode] = {}

_TEMPLATES = ("resource", "unit_phrase", "form_words", "plugin_config", "mig_layout",
              "product_suffix")


def register(mode: SharingMode) -> SharingMode:
    """Add ``mode``; ValueError if its name is taken or a template does not fill."""
    if mode.name in MODES:
        raise ValueError(f"sharing mode {mode.name!r} is already registered")
    for name in _TEMPLATES:
        try:
            getattr(mode, name).format(**TEMPLATE_FIELDS)
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"sharing mode {mode.name!r}: {name}: {getattr(mode, name)!r} "
                             f"uses {e}; a template may use {', '.join(TEMPLATE_FIELDS)}")
    MODES[mode.name] = mode
    return mode


def modes_where(test: Callable[[SharingMode], bool]) -> str:
    """The modes that pass ``test``, as words: ``mode mig``, ``modes mps and
    timeslicing``."""
    names = [m.name for m in MODES.values() if test(m)]
    if len(names) < 2:
        return f"mode {''.join(names) or '(none)'}"
    return f"modes {', '.join(names[:-1])} and {names[-1]}"


def layout_mig_profile(layout: str) -> str | None:
    """The MIG profile whose instances the MIG manager's ``nvidia.com/mig.config``
    ``layout`` makes of a node's GPUs (``all-3g.40gb``: ``3g.40gb``); None for a layout
    without MIG (``all-disabled``) or one no mode writes."""
    if any(layout == m.mig_layout for m in MODES.values() if not m.partitioned):
        return None
    for mode in MODES.values():
        head, found, tail = mode.mig_layout.partition("{mig_profile}")
        if (mode.partitioned and found and len(layout) > len(head) + len(tail)
                and layout.startswith(head) and layout.endswith(tail)):
            return layout[len(head):len(layout) - len(tail)]
    return None


def cpu_only_mode() -> SharingMode:
    """The mode of every pool with ``gpu: none`` (the one registered without a GPU)."""
    return next(m for m in MODES.values() if not m.gpu)


def modes_taking(parameter: Parameter) -> str:
    """The modes whose pools must set ``parameter``: ``mode mig``, ``modes mps and
    timeslicing``."""
    return modes_where(lambda m: m.parameter is parameter)


EXCLUSIVE = register(SharingMode(
    name="exclusive", summary="whole GPUs: each unit is one GPU",
    parameter=None, shared=False, resource=GPU_RESOURCE, unit="GPU", unit_phrase="GPU",
    form_words="whole GPU", plugin_config="default", mig_strategy="none",
    mig_layout="all-disabled", sharing_strategy="none"))

# MIG with the device plugin's single strategy: the pool has one profile, and each MIG
# instance is one nvidia.com/gpu (the mixed strategy's nvidia.com/mig-<profile> would
# leave the node without nvidia.com/gpu). GPU feature discovery then labels the node
# <product>-MIG-<profile> (NVIDIA/k8s-device-plugin internal/lm/mig-strategy.go,
# newMigStrategySingleLabeler; resource.go, NewMIGResourceLabeler).
MIG = register(SharingMode(
    name="mig", summary="Multi-Instance GPU: each unit is one MIG instance of `migProfile`",
    parameter=Parameter.MIG_PROFILE, shared=False, resource=GPU_RESOURCE, unit="MIG slice",
    unit_phrase="MIG {mig_profile} slice", form_words="MIG slice {mig_profile}",
    plugin_config="mig-single", mig_strategy="single", mig_layout="all-{mig_profile}",
    sharing_strategy="none", product_suffix="-MIG-{mig_profile}"))

# Time-slicing and MPS without renameByDefault: the replicas are the node's count of
# nvidia.com/gpu, and GPU feature discovery appends -SHARED to the product instead
# (NVIDIA/k8s-device-plugin internal/lm/resource.go, getProductName: shared and not
# renamed).

MPS = register(SharingMode(
    name="mps", summary="CUDA MPS: each GPU is shared by `replicas` pods at once",
    parameter=Parameter.REPLICAS, shared=True, resource=GPU_RESOURCE, unit="share",
    unit_phrase="MPS share", form_words="MPS share (1 of {replicas})",
    plugin_config="mps-{replicas}", mig_strategy="none", mig_layout="all-disabled",
    sharing_strategy="mps", product_suffix="-SHARED", sharing_key="mps"))

TIMESLICING = register(SharingMode(
    name="timeslicing", summary="time-slicing: each GPU is shared by `replicas` pods in turn",
    parameter=Parameter.REPLICAS, shared=True, resource=GPU_RESOURCE, unit="share",
    unit_phrase="time-sliced share", form_words="time-sliced share (1 of {replicas})",
    plugin_config="timeslicing-{replicas}", mig_strategy="none", mig_layout="all-disabled",
    sharing_strategy="time-slicing", product_suffix="-SHARED", sharing_key="timeSlicing",
    sharing_options=MappingProxyType({"failRequestsGreaterThanOne": True})))

CPU_ONLY = register(SharingMode(
    name="none", summary="no GPU (a pool with `gpu: none`): each unit of quota is one "
    "node's cpu and memory", parameter=None, shared=False, resource="", unit="node",
    unit_phrase="server", form_words="CPU only", plugin_config="",
    mig_strategy="none", mig_layout="", sharing_strategy="none", gpu=False))
