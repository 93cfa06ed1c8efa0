"""A hub model's GGUF header without the whole model, for `hearth plan` (as catalog_header for a catalog
model): the metadata and tensor table sit at the start of the file, so HTTP Range requests fetch a first
few MiB, and more until the header parses. `hearth plan org/repo:file.gguf` downloaded the whole file
first (40 GB for a 70B's Q4_K_M) to answer whether it fits. A file already downloaded is read where it
is; a split model's first file (its header names the others' tensors only in them) is downloaded whole,
as hearth run would."""

from __future__ import annotations

import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hearth.errors import DownloadError
from hearth.loader.gguf_loader import GGUF_MAGIC, SPLIT_NAME, GGUFFile, TruncatedHeader
from hearth.loader.hub import (HTTP_HINTS, HubRedirects, HubRef, auth_headers, download_hub, hub_path, hub_url,
                               not_gguf)
from hearth.loader.store import byte_bar, staging_dir

FIRST_BYTES = 4 << 20
"""The first request's bytes: most headers fit (a 150k-token vocabulary is ~3 MiB); each next asks 4x more."""


@contextmanager
def hub_header(ref: HubRef, home=None, progress: bool = True, timeout: float = 60.0) -> Iterator[GGUFFile]:
    """The model's GGUFFile: the downloaded file, else one over its first bytes (tensors without data),
    valid inside the block."""
    dest = hub_path(ref, home)
    if dest.is_file() or SPLIT_NAME.search(ref.file):
        yield GGUFFile(download_hub(ref, home, progress, timeout))
        return
    with tempfile.TemporaryDirectory(prefix="header-", dir=staging_dir(home)) as tmp:
        yield _read_header(hub_url(ref), Path(tmp) / Path(ref.file).name, ref, progress, timeout)


def _read_header(url: str, head: Path, ref: HubRef, progress: bool, timeout: float) -> GGUFFile:
    have, want = 0, FIRST_BYTES
    with open(head, "wb") as out, byte_bar(f"{ref.file} (header)", None, progress) as bar:
        while True:
            data, total = _fetch(url, have, have + want - 1, timeout)
            if have == 0 and not data.startswith(GGUF_MAGIC):
                raise not_gguf(url, data)
            out.write(data)
            out.flush()
            have += len(data)
            bar.update(len(data))
            try:
                return GGUFFile(head, size=total)
            except TruncatedHeader:
                if not data or (total is not None and have >= total):
                    raise
            want *= 4


def _fetch(url: str, start: int, end: int, timeout: float) -> tuple[bytes, int | None]:
    """Bytes [start, end] of the file at url (fewer at its end), and the file's whole size where the
    server says it. A server that ignores Range sends the whole file: its first bytes are read, then
    the connection is dropped."""
    request = urllib.request.Request(url, headers={**auth_headers(), "Range": f"bytes={start}-{end}"})
    try:
        resp = urllib.request.build_opener(HubRedirects()).open(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        hint = HTTP_HINTS.get(e.code)
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}" + (f"; {hint}" if hint else "")) from None
    except (urllib.error.URLError, OSError) as e:
        raise DownloadError(f"cannot reach {url}: {getattr(e, 'reason', e)}") from None
    with resp:
        try:
            if resp.status == 206:
                total = resp.headers.get("Content-Range", "").rpartition("/")[2]
                return resp.read(end - start + 1), int(total) if total.isdigit() else None
            length = resp.headers.get("Content-Length")
            resp.read(start)  # the whole file from its first byte: skip what is here already
            return resp.read(end - start + 1), int(length) if length and length.isdigit() else None
        except OSError as e:
            raise DownloadError(f"reading {url} failed ({e}); run again") from None
