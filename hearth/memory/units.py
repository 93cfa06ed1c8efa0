"""Numbers as a person reads them in a one-line reason."""

from __future__ import annotations


def nbytes(n: float) -> str:
    """Binary units, as `free` and `top` print them: 1.5 GiB, 92.1 MiB, 23,040 B."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:,.1f} GB/s"


def flops(n: float, op: str = "FLOP") -> str:
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if n >= size:
            return f"{n / size:,.2f} {prefix}{op}"
    return f"{n:,.0f} {op}"


def ops(n: float) -> str:
    """Integer operations (int8 multiply-adds count 2)."""
    return flops(n, "OP")


def count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:,.1f}{unit}"
    return f"{n:,.0f}"
