"""The planner's table of how hearth's CPU kernels hold each weight type equals what
hearth.layers.linear actually builds (so the two cannot drift apart), and the planner prices this
machine's weights as the CPU tier running holds them (a tiered module: make test runs it per tier)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hearth.backends import select
from hearth.backends.base import Backend
from hearth.backends.cpu_linear import native_paths
from hearth.layers.linear import TORCH_PATHS
from hearth.memory.devices import Device
from hearth.memory.layouts import LAYOUTS, held_bytes
from hearth.memory.weights import WeightTensor
from tests.layers.test_quant import random_tensor

ROWS, COLS = 80, 512  # 80 rows: int4pack pads them to 128
THIS_CPU = Device("this", "cpu", 1 << 30, 1e10, 1e11, "made up: only its kind matters")


def module_bytes(module: torch.nn.Module) -> int:
    """Bytes of the distinct tensors a linear layer keeps (int4 weights hold two tensors each)."""
    seen, total = set(), 0
    for m in module.modules():
        tensors = [v for v in vars(m).values() if isinstance(v, torch.Tensor)]
        tensors += [t for v in vars(m).values() if hasattr(v, "packed") for t in (v.packed, v.scale_zero)]
        tensors += list(m._parameters.values()) + list(m._buffers.values())
        for t in tensors:
            if t is not None and t.untyped_storage().data_ptr() not in seen:
                seen.add(t.untyped_storage().data_ptr())
                total += t.untyped_storage().nbytes()
    return total


def test_every_torch_path_type_is_in_the_table():
    assert set(TORCH_PATHS) == set(LAYOUTS["hearth-cpu-torch"].held)


@pytest.mark.parametrize("qtype", sorted(TORCH_PATHS, key=lambda q: q.name), ids=lambda q: q.name)
def test_held_bytes_match_the_linear_layer(qtype):
    t = random_tensor(qtype, ROWS, COLS, np.random.default_rng(0))
    w = WeightTensor("w", qtype, (ROWS, COLS))
    assert held_bytes(w, LAYOUTS["hearth-cpu-torch"]) == module_bytes(Backend().linear(t))
    cpu = select("cpu")  # at the torch tier, the torch backend
    here = LAYOUTS[THIS_CPU.layout]  # what the planner prices for this machine at this tier
    assert here.name == ("hearth-cpu-torch" if type(cpu) is Backend else "hearth-cpu")
    if type(cpu) is not Backend and native_paths()[qtype] == "native":  # the C++ kernels keep no copy
        assert module_bytes(cpu.linear(t)) == 0
        assert held_bytes(w, here) == t.data.nbytes
    else:
        assert held_bytes(w, here) == module_bytes(cpu.linear(t))
    # the file layout is the GGUF bytes themselves
    assert held_bytes(WeightTensor("w", qtype, (ROWS, COLS)), LAYOUTS["file"]) == t.data.nbytes


@pytest.mark.parametrize("qtype", sorted(TORCH_PATHS, key=lambda q: q.name), ids=lambda q: q.name)
def test_head_held_bytes_match_the_head(qtype):
    # an output head may be held otherwise (int8 rows for two int4 planes where ATen runs below AVX-512)
    t = random_tensor(qtype, ROWS, COLS, np.random.default_rng(0))
    w = WeightTensor("output.weight", qtype, (ROWS, COLS))
    assert held_bytes(w, LAYOUTS["hearth-cpu-torch"], head=True) == module_bytes(Backend().head(t))
