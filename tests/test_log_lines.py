"""hearth's log lines in both formats (hearth.commands.logs): the format says who is talking, so no message
starts `hearth: ` itself; a server's log once read `WARNING:  hearth: speculative decoding is off: ...`."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import hearth
from hearth.commands.logs import configure_logging
from hearth.kernels import tiers

LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def _leading_text(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return node.values[0].value
    return None


def test_no_log_message_says_hearth_itself():
    package = Path(hearth.__file__).parent
    said = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LEVELS
                    and node.args and (_leading_text(node.args[0]) or "").startswith("hearth: ")):
                said.append(f"{path.relative_to(package)}:{node.lineno}")
    assert said == []
    # logged as it is by tiers.selected (and shown by hearth doctor)
    assert not tiers.choose({"HEARTH_CPU_TIER": "avx9000"}, set())[1].startswith("hearth: ")


def test_a_warning_reads_as_uvicorn_s_own_in_a_server_and_as_hearth_s_in_a_terminal(capsys):
    capsys.readouterr()
    try:
        configure_logging("info")
        logging.getLogger("hearth.llm").warning("speculative decoding is off: %s", "no draft")
        logging.getLogger("hearth.loader").info("draft d.gguf: matrices at q8_0")
        configure_logging("info", terminal=True)
        logging.getLogger("hearth.llm").warning("speculative decoding is off: %s", "no draft")
        logging.getLogger("hearth.loader").info("draft d.gguf: matrices at q8_0")
    finally:
        configure_logging("warning", terminal=True)  # as hearth.cli leaves it
    assert capsys.readouterr().err.splitlines() == [
        "WARNING:  speculative decoding is off: no draft", "INFO:     draft d.gguf: matrices at q8_0",
        "hearth: warning: speculative decoding is off: no draft", "hearth: draft d.gguf: matrices at q8_0"]
