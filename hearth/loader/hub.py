"""Hugging Face hub references, fetched with the standard library.

Accepted forms:  org/repo:file.gguf   org/repo@rev:file.gguf   hf://org/repo[@rev]/path/file.gguf
and the file's link as the hub's page gives it, https://huggingface.co/org/repo/resolve/rev/path/file.gguf
(or .../blob/..., hf.co, or $HF_ENDPOINT's host).
The file comes from $HF_ENDPOINT (default https://huggingface.co) at /{org}/{repo}/resolve/{rev}/{file},
with $HF_TOKEN as a Bearer token when set. It streams into `<dest>.part`, which a later try resumes
with a Range request, and is renamed to its final name only once complete (layout: hearth.loader.store)."""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote, urlsplit

from hearth.errors import DownloadError, ModelNotFoundError
from hearth.loader.gguf_loader import GGUF_MAGIC, SPLIT_NAME
from hearth.loader.store import CHUNK, byte_bar, copy_hashed, hearth_home, install_file

DEFAULT_ENDPOINT = "https://huggingface.co"
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_FORMS = (
    re.compile(rf"^(?P<org>{_NAME})/(?P<repo>{_NAME})(?:@(?P<rev>[^/:@]+))?:(?P<file>.+)$"),
    re.compile(rf"^hf://(?P<org>{_NAME})/(?P<repo>{_NAME})(?:@(?P<rev>[^/:@]+))?/(?P<file>.+)$"),
)
_LINK = re.compile(rf"^https?://(?P<host>[^/]+)/(?P<org>{_NAME})/(?P<repo>{_NAME})/(?:resolve|blob)/(?P<rev>[^/?#]+)/"
                   r"(?P<file>[^?#]+)(?:[?#].*)?$")
"""A file's link copied from the hub's page (its download button adds ?download=true)."""
HUB_HOSTS = ("huggingface.co", "hf.co")
_OLLAMA_HOST = re.compile(r"^(?:hf\.co|huggingface\.co)/", re.IGNORECASE)
_REPO_PAGE = re.compile(rf"^https?://(?P<host>[^/]+)/(?P<org>{_NAME})/(?P<repo>{_NAME})(?:/(?:tree|blob)/[^?#]*)?/?"
                        r"(?:[?#].*)?$")


def repo_page(text: str) -> str | None:
    """org/repo when `text` is a repo's page on the hub (a link with no file in it), else None."""
    m = _REPO_PAGE.match(text)
    return f"{m['org']}/{m['repo']}" if m and m["host"].lower().removeprefix("www.") in _hosts() else None
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# What each refusal usually means for a hub user.
HTTP_HINTS = {
    401: "set HF_TOKEN to a token that can read this repo",
    403: "the repo may be gated: accept its terms on the hub and set HF_TOKEN",
    404: "check the org/repo, the revision and the file name",
}


@dataclass(frozen=True, slots=True)
class HubRef:
    org: str
    repo: str
    file: str
    """Path inside the repo, e.g. `SmolLM2-135M-Instruct-Q4_K_M.gguf` or `q4/model.gguf`."""
    revision: str = "main"

    def __str__(self) -> str:
        rev = "" if self.revision == "main" else f"@{self.revision}"
        return f"{self.org}/{self.repo}{rev}:{self.file}"


def parse_hub_ref(text: str) -> HubRef | None:
    """A HubRef when `text` has one of the accepted forms, else None."""
    bare = _OLLAMA_HOST.sub("", text)  # ollama's hf.co/org/repo:... names the same repo
    for form in _FORMS:
        if m := form.match(bare):
            return _ref(text, m)
    if (m := _LINK.match(text)) and m["host"].lower().removeprefix("www.") in _hosts():
        return _ref(text, m)
    return None


def _ref(text: str, m: re.Match) -> HubRef:
    if any(seg in ("", ".", "..") for seg in m["file"].split("/")):
        raise ModelNotFoundError(f"hub reference {text!r} has an unsafe file path")
    return HubRef(m["org"], m["repo"], m["file"], m["rev"] or "main")


def _hosts() -> tuple[str, ...]:
    """The hosts whose file links are hub references: the hub's, and $HF_ENDPOINT's (a mirror)."""
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).netloc.lower()
    return (*HUB_HOSTS, endpoint.removeprefix("www."))


def hub_path(ref: HubRef, home=None) -> Path:
    repo_dir = ref.repo if ref.revision == "main" else f"{ref.repo}@{ref.revision}"
    return hearth_home(home) / "hub" / ref.org / repo_dir / ref.file


def hub_url(ref: HubRef) -> str:
    endpoint = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    return f"{endpoint}/{ref.org}/{ref.repo}/resolve/{quote(ref.revision, safe='')}/{quote(ref.file)}"


def download_hub(ref: HubRef, home=None, progress: bool = True, timeout: float = 60.0) -> Path:
    """Path of the downloaded file; fetched (or resumed) only when not already complete. The first file
    of a split model (NAME-00001-of-0000N.gguf) brings the others with it, into the same folder."""
    first = _download_file(ref, home, progress, timeout)
    if (m := SPLIT_NAME.search(ref.file)) and int(m.group(1)) == 1:
        prefix, count = ref.file[:m.start()], int(m.group(2))
        for i in range(2, count + 1):
            _download_file(replace(ref, file=f"{prefix}-{i:05d}-of-{count:05d}.gguf"), home, progress, timeout)
    return first


def _download_file(ref: HubRef, home, progress: bool, timeout: float) -> Path:
    dest = hub_path(ref, home)
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    url = hub_url(ref)
    redirects = HubRedirects()
    with _open(url, part, redirects, timeout) as resp:
        offset = _resume_offset(resp, part, url)
        total = _content_length(resp, offset)
        hasher = _hash_prefix(part, offset)
        with open(part, "r+b" if offset else "wb") as out, \
                byte_bar(f"downloading {ref.file}", total, progress, initial=offset) as bar:
            out.seek(offset)
            out.truncate()
            try:
                copy_hashed(resp, out, hasher, bar)
            except (OSError, http.client.HTTPException) as e:
                raise DownloadError(f"download of {url} interrupted ({e}); run again to resume") from None
        expected = _expected_sha256(redirects.linked_etag, resp)
    _check_complete(part, url, total, hasher.hexdigest(), expected)
    return install_file(part, dest)


class HubRedirects(urllib.request.HTTPRedirectHandler):
    """Follows hub -> CDN redirects. The token goes only to the host it was meant for, and the
    sha256 the hub announces on the redirect (X-Linked-Etag, for LFS files) is kept."""

    def __init__(self):
        self.linked_etag: str | None = None

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        self.linked_etag = headers.get("X-Linked-Etag") or self.linked_etag
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlsplit(newurl).netloc != urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


def auth_headers() -> dict[str, str]:
    """A hub request's headers: $HF_TOKEN as a Bearer token when set (HubRedirects keeps it off other hosts)."""
    headers = {"User-Agent": "hearth"}
    if token := os.environ.get("HF_TOKEN"):
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _open(url: str, part: Path, redirects: HubRedirects, timeout: float):
    have = part.stat().st_size if part.is_file() else 0
    headers = auth_headers()
    if have:
        headers["Range"] = f"bytes={have}-"
    opener = urllib.request.build_opener(redirects)
    try:
        return opener.open(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the partial file is not a prefix the server knows: start over
            part.unlink()
            return _open(url, part, redirects, timeout)
        hint = HTTP_HINTS.get(e.code)
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}" + (f"; {hint}" if hint else "")) from None
    except (urllib.error.URLError, OSError) as e:
        raise DownloadError(f"cannot reach {url}: {getattr(e, 'reason', e)}") from None


def _resume_offset(resp, part: Path, url: str) -> int:
    """Where the body starts in the file: the partial size for a 206, else 0 (full body)."""
    if resp.status != 206:
        return 0
    have = part.stat().st_size
    m = re.match(r"bytes (\d+)-", resp.headers.get("Content-Range", ""))
    if not m or int(m[1]) != have:
        part.unlink()
        raise DownloadError(f"{url}: server resumed at the wrong offset; run again to start over")
    return have


def _content_length(resp, offset: int) -> int | None:
    length = resp.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


def _hash_prefix(part: Path, offset: int):
    hasher = hashlib.sha256()
    if offset:
        with open(part, "rb") as f:
            while chunk := f.read(min(CHUNK, offset - f.tell())):
                hasher.update(chunk)
    return hasher


def _expected_sha256(linked_etag: str | None, resp) -> str | None:
    # LFS files carry their sha256 as the ETag; small git files carry a sha1, which we ignore
    for value in (linked_etag, resp.headers.get("X-Linked-Etag"), resp.headers.get("ETag")):
        tag = (value or "").removeprefix("W/").strip('"').lower()
        if _SHA256.match(tag):
            return tag
    return None


def _check_complete(part: Path, url: str, total: int | None, sha256: str, expected: str | None) -> None:
    size = part.stat().st_size
    if total is not None and size != total:
        raise DownloadError(f"download of {url} stopped at {size} of {total} bytes; run again to resume")
    if expected is not None and sha256 != expected:
        part.unlink()
        raise DownloadError(f"{url}: sha256 mismatch (got {sha256}, expected {expected})")
    with open(part, "rb") as f:
        head = f.read(len(GGUF_MAGIC))
    if head != GGUF_MAGIC:  # a login or proxy page, a git pointer: it was kept, listed and "pulled" (exit 0)
        part.unlink()
        raise not_gguf(url, head)


def not_gguf(url: str, head: bytes) -> DownloadError:
    """What came from url begins with `head`, not GGUF's magic."""
    return DownloadError(f"{url}: what came is not a GGUF file (it begins {head[:len(GGUF_MAGIC)]!r}, not "
                         f"{GGUF_MAGIC!r}); check the file name, or HF_ENDPOINT and HF_TOKEN")
