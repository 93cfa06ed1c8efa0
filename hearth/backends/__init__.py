"""Backends: how a model's layers run on a device, one object chosen once from EngineConfig.device
(DESIGN.md, style 12; hearth.backends.base has the interface).

  torch  torch's kernels: the reference every backend is tested against
  cpu    hearth's C++ kernels at the best tier this CPU runs (HEARTH_CPU_TIER forces one); at the torch
         tier it is the torch backend
  cuda   planned (DESIGN.md, "Devices"): asked for, it is one warning line and the CPU runs instead
`auto` is cuda where it exists and a GPU is present, else cpu."""

from __future__ import annotations

import functools
import logging

from hearth.backends.base import Backend
from hearth.config import DEVICES
from hearth.errors import UnsupportedError
from hearth.kernels import tiers

log = logging.getLogger("hearth")

def select(device: str = "auto") -> Backend:
    """The backend for EngineConfig.device; one object per backend, so models built on it share it."""
    if device not in DEVICES:
        raise UnsupportedError(f"device: {device!r} is not one of {', '.join(DEVICES)}")
    if device == "cuda":
        log.warning("hearth: --device cuda: this build has no CUDA backend yet; running on the CPU")
    return _backend("torch" if device == "torch" else "cpu")


@functools.cache
def _backend(name: str) -> Backend:
    tier = tiers.selected()
    if name == "torch" or not tier.native:
        return Backend()
    from hearth.backends.cpu import CpuBackend  # builds or loads the C++ library's bindings

    return CpuBackend(tier)
