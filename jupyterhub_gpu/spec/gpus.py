"""Static facts about NVIDIA GPUs and Azure GPU VM sizes.

Pure data, no I/O. The MIG tables list the GPU-instance profiles that the NVIDIA
MIG user guide documents for each model (the ``+me`` media-extension variants are
left out: the device plugin's mixed strategy does not advertise them separately).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MigProfile:
    name: str  # e.g. "3g.40gb"
    per_gpu: int  # how many such instances fit on one GPU

    @property
    def memory_gb(self) -> int:
        return int(self.name.split(".")[1].removesuffix("gb"))


@dataclass(frozen=True)
class GpuModel:
    name: str  # the spec's name, e.g. "A100-80GB"
    memory_gb: int
    product: str  # the nvidia.com/gpu.product label GPU feature discovery sets
    mig: tuple[MigProfile, ...] = ()

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig if p.name == name), None)


#: ``gpu: none``: a CPU-only pool (its VM sizes carry no GPU).
NO_GPU = GpuModel("none", 0, "")


def _mig(*pairs: tuple[str, int]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(n, c) for n, c in pairs)


GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        NO_GPU,
        GpuModel("T4", 16, "Tesla-T4"),
        GpuModel("A10", 24, "NVIDIA-A10"),
        GpuModel(
            "A100-40GB",
            40,
            "NVIDIA-A100-SXM4-40GB",
            _mig(("1g.5gb", 7), ("1g.10gb", 4), ("2g.10gb", 3), ("3g.20gb", 2),
                 ("4g.20gb", 1), ("7g.40gb", 1)),
        ),
        GpuModel(
            "A100-80GB",
            80,
            "NVIDIA-A100-80GB-PCIe",
            _mig(("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2),
                 ("4g.40gb", 1), ("7g.80gb", 1)),
        ),
        GpuModel(
            "H100-80GB",
            80,
            "NVIDIA-H100-80GB-HBM3",
            _mig(("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2),
                 ("4g.40gb", 1), ("7g.80gb", 1)),
        ),
        GpuModel(
            "H200",
            141,
            "NVIDIA-H200",
            _mig(("1g.18gb", 7), ("1g.35gb", 4), ("2g.35gb", 3), ("3g.71gb", 2),
                 ("4g.71gb", 1), ("7g.141gb", 1)),
        ),
    )
}


@dataclass(frozen=True)
class VmSize:
    name: str
    cpus: int
    memory_gib: int
    gpus: int
    gpu: str  # key into GPU_MODELS ("none" for a VM size without GPUs)


VM_SIZES: dict[str, VmSize] = {
    v.name: v
    for v in (
        VmSize("Standard_D4s_v5", 4, 16, 0, NO_GPU.name),
        VmSize("Standard_D8s_v5", 8, 32, 0, NO_GPU.name),
        VmSize("Standard_D16s_v5", 16, 64, 0, NO_GPU.name),
        VmSize("Standard_E8s_v5", 8, 64, 0, NO_GPU.name),
        VmSize("Standard_E16s_v5", 16, 128, 0, NO_GPU.name),
        VmSize("Standard_NC4as_T4_v3", 4, 28, 1, "T4"),
        VmSize("Standard_NC8as_T4_v3", 8, 56, 1, "T4"),
        VmSize("Standard_NC16as_T4_v3", 16, 110, 1, "T4"),
        VmSize("Standard_NC64as_T4_v3", 64, 440, 4, "T4"),
        VmSize("Standard_NV36ads_A10_v5", 36, 440, 1, "A10"),
        VmSize("Standard_NV72ads_A10_v5", 72, 880, 2, "A10"),
        VmSize("Standard_NC24ads_A100_v4", 24, 220, 1, "A100-80GB"),
        VmSize("Standard_NC48ads_A100_v4", 48, 440, 2, "A100-80GB"),
        VmSize("Standard_NC96ads_A100_v4", 96, 880, 4, "A100-80GB"),
        VmSize("Standard_ND96asr_v4", 96, 900, 8, "A100-40GB"),
        VmSize("Standard_ND96amsr_A100_v4", 96, 1900, 8, "A100-80GB"),
        VmSize("Standard_ND96isr_H100_v5", 96, 1900, 8, "H100-80GB"),
        VmSize("Standard_ND96isr_H200_v5", 96, 1850, 8, "H200"),
    )
}
