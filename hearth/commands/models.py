"""`hearth models`: the catalog and what is on disk, like `ollama list`."""

from __future__ import annotations

import argparse
from pathlib import Path

from hearth.errors import HearthError
from hearth.loader.catalog import CATALOG, CatalogEntry
from hearth.loader.file_type import quantization
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.store import catalog_path, hearth_home, marker_matches

HEADER = ("NAME", "SIZE", "ARCH/QUANT", "DOWNLOADED")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options: the model directory is $HEARTH_HOME (default ~/.cache/hearth)."""


def main(args: argparse.Namespace) -> int:
    home = hearth_home()
    rows = [_catalog_row(e, home) for e in CATALOG.values()] + _hub_rows(home)
    print(format_table([HEADER, *rows]))
    return 0


def _catalog_row(entry: CatalogEntry, home: Path) -> tuple[str, ...]:
    path = catalog_path(entry, home)
    # cheap on purpose: size + checksum marker, never a rehash (`hearth pull` does that)
    if marker_matches(path, entry):
        state = f"yes  {path}"
    elif path.is_file():
        state = f"unverified  {path} (run `hearth pull {entry.name}`)"
    else:
        state = "no"
    return entry.name, human_size(entry.size), f"{entry.arch}/{entry.quant}", state


def _hub_rows(home: Path) -> list[tuple[str, ...]]:
    root = home / "hub"
    rows = []
    for path in sorted(root.rglob("*.gguf")) if root.is_dir() else ():
        parts = path.relative_to(root).parts
        if len(parts) < 3:  # not hub/<org>/<repo>/<file>: not ours
            continue
        repo, _, rev = parts[1].partition("@")
        ref = f"{parts[0]}/{repo}{'@' + rev if rev else ''}:{'/'.join(parts[2:])}"
        rows.append((ref, human_size(path.stat().st_size), _arch_quant(path), f"yes  {path}"))
    return rows


def _arch_quant(path: Path) -> str:
    """`llama/Q4_K_M` from the file's header alone (its own part of a split model); "-" where it does not read."""
    try:
        g = GGUFFile(path, size=path.stat().st_size)  # size: this file only, its tensors without data
    except (OSError, ValueError, HearthError):
        return "-"
    return f"{g.arch}/{quantization(g) or '-'}"


def human_size(n: int) -> str:
    size, units = float(n), ("B", "KB", "MB", "GB", "TB")
    for unit in units[:-1]:
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} {units[-1]}"


def format_table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["   ".join([c.ljust(w) for c, w in zip(r, widths)] + [r[-1]]) for r in rows]
    return "\n".join(line.rstrip() for line in lines)
