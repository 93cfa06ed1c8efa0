"""Backends: how a model's layers run on a device, one object chosen once from EngineConfig.device
(DESIGN.md, style 12; hearth.backends.base has the interface).

  torch  torch's kernels: the reference every backend is tested against
  cpu    hearth's C++ kernels at the best tier this CPU runs (HEARTH_CPU_TIER forces one); at the torch
         tier it is the torch backend
  cuda   the Triton kernels (hearth.backends.cuda); asked for without a usable GPU or without Triton,
         one warning line says what is missing and the CPU runs instead
`auto` is cpu: the CUDA backend has yet to run on a real GPU (its kernels are tested in Triton's
interpreter), so a GPU is used only when asked for."""

from __future__ import annotations

import functools
import logging

from hearth.backends.base import Backend
from hearth.config import DEVICES
from hearth.errors import UnsupportedError
from hearth.kernels import native

log = logging.getLogger("hearth")

def select(device: str = "auto") -> Backend:
    """The backend for EngineConfig.device; one object per backend, so models built on it share it."""
    if device not in DEVICES:
        raise UnsupportedError(f"device: {device!r} is not one of {', '.join(DEVICES)}")
    if device == "cuda":
        missing = cuda_missing()
        if missing is None:
            return _backend("cuda")
        log.warning(f"--device cuda: {missing}; running on the CPU")
    return _backend("torch" if device == "torch" else "cpu")


def cuda_missing() -> str | None:
    """What the CUDA backend lacks here, or None."""
    import torch

    if not torch.cuda.is_available():
        return "no usable GPU (torch.cuda.is_available() is False: a CPU build of torch, or no driver)"
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed (pip install -c constraints.txt '.[cuda]' in hearth's checkout)"
    return None


@functools.cache
def _backend(name: str) -> Backend:
    if name == "cuda":
        from hearth.backends.cuda import CudaBackend

        return CudaBackend("cuda")
    if name == "torch" or not native.available():  # the torch tier, or no C++ library built or loaded here
        return Backend()
    from hearth.backends.cpu import CpuBackend

    return CpuBackend(native.loaded_tier)  # the tier whose library loaded (a failed build falls back)
