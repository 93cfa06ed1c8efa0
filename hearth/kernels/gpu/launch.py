"""The one way a Triton kernel is launched: told how each output is partitioned over the grid and which
arguments are only read (the lesson of cuTile Rust: mutable outputs split into disjoint tiles, inputs
shared read-only, the host keeping ownership while a kernel runs).

launch(kernel, grid, args, outputs={name: Tiles | Rows}, reads=(names...)) runs kernel[grid](*args). Every
launch keeps its tensor arguments referenced until the stream has passed the kernel (a CUDA event per
launch; on the CPU, Triton's interpreter runs synchronously). Under HEARTH_CHECK_LAUNCHES=1 (on in
tests) it also checks, before the launch, that each output's tiles are disjoint and cover it and that
no output overlaps another argument in memory, and after it, that the read-only arguments are
unchanged, byte for byte against copies taken before. Each broken rule is a LaunchError naming the
kernel and the argument."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from hearth.errors import HearthError


class LaunchError(HearthError):
    """A launch that breaks the rules above."""


@dataclass(frozen=True, slots=True)
class Tiles:
    """An output's partition over the grid: along output dim d, program ids[axes[d]] writes the block
    [i * block[d], (i + 1) * block[d]) (clipped to the dim); axes[d] None: the whole dim, block unused.
    E.g. y [M, N] written in BM x BN tiles by a grid (cdiv(M, BM), cdiv(N, BN)): Tiles((BM, BN), (0, 1))."""

    block: tuple[int, ...]
    axes: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class Rows:
    """A scattered output: program i along grid axis 0 writes slice index[i] of dim `dim` (index: the
    name of an int tensor argument), whole, or split by the other grid axes: `split` holds (grid axis,
    output dim, block) for each, as Tiles does. Disjoint when the index values are distinct."""

    index: str
    dim: int = 0
    split: tuple[tuple[int, int, int], ...] = ()


def checking() -> bool:
    return os.environ.get("HEARTH_CHECK_LAUNCHES", "") == "1"


_inflight: deque = deque()
"""(event, arguments) of launches the stream may not have passed yet."""


def launch(kernel, grid: tuple[int, ...], args: Mapping[str, object], outputs: Mapping[str, Tiles | Rows],
           reads: Sequence[str], **constexprs) -> None:
    """kernel[grid](*args.values(), **constexprs); args in the kernel's parameter order."""
    name = getattr(kernel, "__name__", None) or getattr(getattr(kernel, "fn", None), "__name__", "kernel")
    tensors = {k: v for k, v in args.items() if isinstance(v, torch.Tensor)}
    check = checking()
    if check:
        names = list(getattr(kernel, "arg_names", args))[:len(args)]
        if list(args) != names:
            raise LaunchError(f"kernel {name}: arguments {list(args)} are not in its parameters' order {names}")
        _check_roles(name, tensors, outputs, reads)
        for out, part in outputs.items():
            if isinstance(part, Rows):
                _check_rows(name, out, tensors[out].shape, part, tensors, grid)
            else:
                _check_tiles(name, out, tensors[out].shape, part, grid)
        _check_aliasing(name, tensors, outputs)
        before = {r: _bytes(tensors[r]).clone() for r in reads}
    kernel[grid](*args.values(), **constexprs)
    _hold(tensors)
    if check:
        for r, copy in before.items():
            if not torch.equal(_bytes(tensors[r]), copy):
                raise LaunchError(f"kernel {name}: read-only argument {r!r} changed")


def _check_roles(name: str, tensors: Mapping[str, torch.Tensor], outputs, reads) -> None:
    for k in [*outputs, *reads]:
        if k not in tensors:
            raise LaunchError(f"kernel {name}: {k!r} is not a tensor argument")
    for k in tensors:
        if (k in outputs) == (k in reads):
            role = "both an output and read-only" if k in outputs else "neither an output nor read-only"
            raise LaunchError(f"kernel {name}: tensor argument {k!r} is {role}")


def _check_tiles(name: str, out: str, shape: torch.Size, tiles: Tiles, grid: tuple[int, ...]) -> None:
    if len(tiles.axes) != len(shape) or len(tiles.block) != len(shape):
        raise LaunchError(f"kernel {name}: output {out!r} has {len(shape)} dims, its Tiles {len(tiles.axes)}")
    used = [a for a in tiles.axes if a is not None]
    if len(set(used)) != len(used) or any(not 0 <= a < len(grid) for a in used):
        raise LaunchError(f"kernel {name}: output {out!r}: grid axes {tiles.axes} for a grid of {len(grid)}")
    for axis, size in enumerate(grid):  # programs along an axis no dim follows all write the same tiles
        if axis not in used and size > 1:
            raise LaunchError(f"kernel {name}: output {out!r}: its tiles overlap ({size} programs along grid "
                              f"axis {axis} write the same tile)")
    for d, (n, b, a) in enumerate(zip(shape, tiles.block, tiles.axes)):
        if a is not None and grid[a] * b < n:
            raise LaunchError(f"kernel {name}: output {out!r}: tiles do not cover dim {d} "
                              f"({grid[a]} programs x {b} = {grid[a] * b} < {n})")


def _check_rows(name: str, out: str, shape: torch.Size, rows: Rows, tensors, grid: tuple[int, ...]) -> None:
    index = tensors.get(rows.index)
    if index is None:
        raise LaunchError(f"kernel {name}: output {out!r}: its index {rows.index!r} is not a tensor argument")
    split = {a: (d, b) for a, d, b in rows.split}
    for axis in range(1, len(grid)):
        if axis not in split and grid[axis] > 1:
            raise LaunchError(f"kernel {name}: output {out!r}: its rows overlap ({grid[axis]} programs along grid "
                              f"axis {axis} write the same row)")
        if axis in split and grid[axis] * split[axis][1] < shape[split[axis][0]]:
            d, b = split[axis]
            raise LaunchError(f"kernel {name}: output {out!r}: tiles do not cover dim {d} "
                              f"({grid[axis]} programs x {b} = {grid[axis] * b} < {shape[d]})")
    if grid[0] != index.numel():
        raise LaunchError(f"kernel {name}: output {out!r}: {grid[0]} programs for {index.numel()} rows of {rows.index!r}")
    values = index.flatten().tolist()
    bad = [v for v in values if not 0 <= v < shape[rows.dim]]
    if bad:
        raise LaunchError(f"kernel {name}: output {out!r}: row {bad[0]} of {rows.index!r} is outside dim "
                          f"{rows.dim} (size {shape[rows.dim]})")
    if len(set(values)) != len(values):
        twice = next(v for v in values if values.count(v) > 1)
        raise LaunchError(f"kernel {name}: output {out!r}: its rows overlap ({rows.index!r} names row {twice} twice)")


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first, last + 1) byte addresses the tensor's elements occupy."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _check_aliasing(name: str, tensors: Mapping[str, torch.Tensor], outputs) -> None:
    for out in outputs:
        a0, a1 = _span(tensors[out])
        for other, t in tensors.items():
            if other == out:
                continue
            b0, b1 = _span(t)
            if a0 < b1 and b0 < a1:
                raise LaunchError(f"kernel {name}: output {out!r} overlaps argument {other!r} in memory")


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as bytes [numel * element_size] (a view where it is contiguous): compared
    as bytes, a NaN in a read-only argument equals itself."""
    return t.detach().contiguous().view(-1).view(torch.uint8)


def _hold(tensors: Mapping[str, torch.Tensor]) -> None:
    """Keep this launch's arguments alive until the stream has passed it; drop the launches it has."""
    while _inflight and _inflight[0][0].query():
        _inflight.popleft()
    if any(t.is_cuda for t in tensors.values()):
        event = torch.cuda.Event()
        event.record()
        _inflight.append((event, tuple(tensors.values())))
