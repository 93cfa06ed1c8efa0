"""No test reads or writes a fixed place on one machine: a fresh clone must pass anywhere.

Rule: a string literal in tests/**/*.py (docstrings aside: they run nothing) fails when it names an
absolute path under a top-level directory of a Linux or macOS file system (MACHINE_ROOTS), or a home
directory (`~/...`). Tests find their files relative to the checkout (`Path(__file__)`), real models
through the `model_path` fixture (HEARTH_HOME), scratch space through pytest's `tmp_path`. HTTP
routes (`/v1/chat/completions`) and made-up paths (`/nonexistent/x.gguf`) are not under such a root.
ALLOWED lists the few exceptions, each with its reason."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MACHINE_ROOTS = ("bin", "boot", "data", "dev", "etc", "home", "lib", "lib64", "media", "mnt", "opt", "proc", "root",
                 "run", "sbin", "scratch", "srv", "sys", "tmp", "Users", "usr", "var", "Volumes", "work")
# a root after a start, space, quote, '=', ':' or '(' (not after a word, '.' or '/': "../../etc" and
# "http://host/tmp" are relative or remote), then the end or a separator; the path runs to a space or quote
_ABSOLUTE = re.compile(rf"(?:^|(?<=[\s'\"=:(,]))(?:/(?:{'|'.join(MACHINE_ROOTS)})(?=$|[/\s'\"),;:])|~/)[^\s'\"]*")

ALLOWED = {  # (file relative to tests/, path prefix): why it is not a machine-specific place
    ("layers/test_linear.py", "/proc/self/"): "this process's own status, on every Linux",
    ("memory/test_resident.py", "/proc/self/"): "this process's own status and clear_refs, on every Linux",
    ("memory/test_this_machine.py", "/bin/false"): "a program that fails, on every POSIX system",
    ("server/test_kv_disk_server.py", "/tmp/x"): "a bad slot file name the server must refuse (never opened)",
    ("kvstore/test_snapshot.py", "/etc/passwd"): "a bad snapshot name that must be refused (never opened)",
    ("loader/test_catalog.py", "~/no-such-hearth-model.gguf"): "a model path that must not exist (never created)",
}
SELF = Path(__file__).name  # its examples of bad paths are data


def machine_paths(source: str) -> list[tuple[int, str]]:
    """(line, path) of each machine-specific absolute path named in a string literal of `source`."""
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr)}
    return [(n.lineno, m.group()) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
            for m in _ABSOLUTE.finditer(n.value)]


def _allowed(rel: str, path: str) -> bool:
    return any(rel == f and path.startswith(prefix) for f, prefix in ALLOWED)


def test_no_test_names_a_machine_specific_path():
    bad = [f"{rel}:{line}: {literal!r}"
           for path in sorted(TESTS.rglob("*.py")) if path.name != SELF
           for rel in [path.relative_to(TESTS).as_posix()]
           for line, literal in machine_paths(path.read_text())
           if not _allowed(rel, literal)]
    assert not bad, "absolute paths outside the checkout, HEARTH_HOME and tmp_path:\n" + "\n".join(bad)


def test_every_allowance_is_still_used():
    used = {(rel, prefix) for rel, prefix in ALLOWED
            if any(p.startswith(prefix) for _, p in machine_paths((TESTS / rel).read_text()))}
    assert used == set(ALLOWED)


def test_the_rule_catches_fixed_folders_and_lets_routes_pass():
    caught = machine_paths('import os\nos.environ.get("HEARTH_TEST_MODELS_DIR", "/tmp/models")\n'
                           'f"--dir=/work/x"\n"cd /home/me && ls"\n"~/models/a.gguf"\n"/root"\n')
    assert sorted(caught) == [(2, "/tmp/models"), (3, "/work/x"), (4, "/home/me"), (5, "~/models/a.gguf"),
                              (6, "/root")]
    passed = machine_paths('"""Docstrings may say /tmp/models."""\n"/v1/chat/completions"\n"/health"\n'
                           '"../../etc/passwd"\n"http://127.0.0.1/tmp"\n"/nonexistent/dir/model.gguf"\n"a/b"\n')
    assert passed == []
