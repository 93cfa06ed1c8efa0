"""Devices the planner knows: datasheet presets, and `this` machine (detected and measured).

Figures per preset: memory, peak memory bandwidth, and dense bf16 tensor throughput without
sparsity, from the vendor's datasheet. Memory sizes are binary, as memory chips are ("80 GB" of
HBM is 80 GiB; a "128GB" Mac has 128 GiB); bandwidth and FLOP/s are decimal. Apple does not
publish GPU FLOP/s: those are estimated as GPU cores x 128 FP32 lanes x 2 FLOPs x clock (Apple
GPUs run bf16 at the fp32 rate)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hearth.memory import PlanError

GB, GiB, TB = 1e9, 2**30, 1e12


@dataclass(frozen=True, slots=True)
class Kind:
    """How a class of device spends its memory."""

    usable_fraction: float
    """Share of the memory a model may use; the rest is the OS and everything else."""
    runtime_bytes: int
    """Fixed cost of the runtime before any model byte: torch + hearth, CUDA context, ..."""
    act_bytes: int
    """Bytes of one activation value (hearth computes in f32 on CPU, bf16 on GPUs)."""
    usable_why: str
    runtime_why: str
    layout: str
    """How weights are held (hearth.memory.layouts): hearth's CPU kernels repack, GPU kernels do not."""
    holds_host_data: bool
    """The tokenizer and other host-side data live in this memory (CPU and unified memory)."""


KINDS = {
    "cpu": Kind(0.9, 300 * 2**20, 4, "10% left to the OS and other programs",
                "torch and hearth's libraries resident before any model, ~300 MiB", "hearth-cpu", True),
    "cuda": Kind(1.0, 1 * GiB, 2, "GPU memory is the model's; the runtime is counted apart",
                 "CUDA context + cuBLAS workspaces + allocator slack, ~1 GiB", "file", False),
    "apple": Kind(0.75, 1 * GiB, 2, "macOS lets the GPU wire about 75% of unified memory",
                  "Metal runtime and torch, ~1 GiB", "file", True),
    "jetson": Kind(0.9, 1 * GiB, 2, "unified memory: 10% left to the OS",
                   "CUDA context + cuBLAS workspaces, ~1 GiB", "file", True),
}


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    kind: str
    memory_bytes: int
    bandwidth: float
    """Bytes per second."""
    peak_flops: float
    """Dense bf16 FLOP/s."""
    source: str
    """Where the figures come from, said in the report."""
    runtime_bytes: int | None = None
    """Measured runtime cost (this machine); None = the kind's estimate."""
    int8_ops: float = 0.0
    """Int8 multiply-add ops a second of the CPU kernels that run quantized weights' prefills (this
    machine's, measured: hearth.memory.bandwidth); 0 where none are measured (presets, AMX, torch)."""

    @property
    def usable_bytes(self) -> int:
        return int(self.memory_bytes * KINDS[self.kind].usable_fraction)

    @property
    def runtime(self) -> int:
        return self.runtime_bytes if self.runtime_bytes is not None else KINDS[self.kind].runtime_bytes

    @property
    def act_bytes(self) -> int:
        return KINDS[self.kind].act_bytes

    @property
    def layout(self) -> str:
        """How it holds weights (hearth.memory.layouts): a CPU as this process's tier does."""
        from hearth.memory.layouts import cpu_layout  # torch: not for a look at the presets

        return cpu_layout(KINDS[self.kind].layout)


def _preset(name: str, kind: str, mem_gb: float, bw_gbs: float, tflops: float, source: str) -> Device:
    return Device(name, kind, int(mem_gb * GiB), bw_gbs * GB, tflops * TB, source)


PRESETS: dict[str, Device] = {d.name.lower().replace(" ", "-"): d for d in (
    _preset("H200", "cuda", 141, 4800, 989, "NVIDIA H200 SXM datasheet"),
    _preset("H100 SXM", "cuda", 80, 3350, 989, "NVIDIA H100 SXM datasheet"),
    _preset("B200", "cuda", 180, 8000, 2250, "NVIDIA DGX/HGX B200 datasheet, per GPU"),
    _preset("A100 80GB", "cuda", 80, 2039, 312, "NVIDIA A100 80GB SXM datasheet"),
    _preset("L40S", "cuda", 48, 864, 362, "NVIDIA L40S datasheet"),
    _preset("RTX 3090", "cuda", 24, 936, 71, "GA102 whitepaper (FP16/BF16 tensor, FP32 accumulate)"),
    _preset("RTX 4090", "cuda", 24, 1008, 165, "Ada whitepaper (FP16/BF16 tensor, FP32 accumulate)"),
    _preset("RTX 5090", "cuda", 32, 1792, 209.5, "Blackwell GeForce whitepaper (FP32 accumulate)"),
    _preset("M2 Max", "apple", 96, 400, 13.6, "Apple spec (38-core GPU, 96 GB); FLOP/s estimated"),
    _preset("M2 Ultra", "apple", 192, 800, 27.2, "Apple spec (76-core GPU, 192 GB); FLOP/s estimated"),
    _preset("M3 Max", "apple", 128, 400, 14.2, "Apple spec (40-core GPU, 128 GB); FLOP/s estimated"),
    _preset("M3 Ultra", "apple", 512, 819, 28.4, "Apple spec (80-core GPU, 512 GB); FLOP/s estimated"),
    _preset("M4 Max", "apple", 128, 546, 16.1, "Apple spec (40-core GPU, 128 GB); FLOP/s estimated"),
    _preset("Jetson AGX Orin", "jetson", 64, 204.8, 42.5, "NVIDIA Jetson AGX Orin 64GB datasheet (dense FP16)"),
)}
THIS = "this"
ALIASES = {"h100": "h100-sxm", "a100": "a100-80gb", "orin": "jetson-agx-orin", "jetson-orin": "jetson-agx-orin",
           "3090": "rtx-3090", "4090": "rtx-4090", "5090": "rtx-5090",
           "cpu": THIS}  # serve's and run's --device cpu: this machine's CPU, the one `this` measures
GPU_WORDS = ("cuda", "gpu")
"""serve's --device cuda and its like: no GPU is measured here; a plan names the GPU's model."""


def known_devices() -> list[str]:
    return [THIS, *PRESETS]


def device_key(name: str) -> str:
    """The preset key (or THIS) a device name means: case, spaces, underscores and aliases aside."""
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    return ALIASES.get(key, key)


def get_device(name: str, memory_gib: float | None = None, refresh: bool = False) -> Device:
    """A preset by name (case, spaces and underscores do not matter) or `this` machine, measured."""
    key = device_key(name)
    if key == THIS:
        from hearth.memory.this_machine import this_device

        device = this_device(refresh=refresh)
    elif key in PRESETS:
        device = PRESETS[key]
    elif key in GPU_WORDS:
        gpus = ", ".join(k for k, d in PRESETS.items() if d.kind == "cuda")
        raise PlanError(f"--device {name}: name the GPU's model for its figures ({gpus}); this (or cpu): this "
                        "machine's CPU, measured")
    else:
        raise PlanError(f"unknown device {name!r}; known: {', '.join(known_devices())}")
    if memory_gib is not None:
        if memory_gib <= 0:
            raise PlanError(f"--memory-gib must be positive, got {memory_gib:g}")
        device = replace(device, memory_bytes=int(memory_gib * GiB),
                         source=device.source + f", memory set to {memory_gib:g} GiB")
    return device
