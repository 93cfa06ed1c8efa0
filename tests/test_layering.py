"""The one-way import rule of DESIGN.md, checked by parsing every module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

import hearth

ROOT = Path(hearth.__file__).parent
# Highest first: a package may import itself, anything after it in this list, and SHARED.
# memory (the planner) sits above the kernels, as in DESIGN.md: it prices weights as this process's CPU tier holds them
ORDER = ["entry", "evals", "api", "tool_guard", "bench", "tool_parsers", "engine", "spec_decode", "memory", "runner", "backends", "models", "layers", "kernels", "kvstore", "media", "formats", "loader", "sample"]
ENTRY = {"__init__", "__main__", "cli", "llm", "llm_chat", "llm_draft", "llm_engine", "llm_kv", "llm_load", "llm_lora", "llm_mtp", "llm_pooling", "llm_prompts",
         "llm_args", "llm_recurrent", "llm_requests", "llm_turns", "llm_vision", "llm_vllm_args", "llm_logprobs", "llm_tokenizer", "commands", "cluster"}  # cluster: replicas build an LLM
SHARED = {"config", "sampling_params", "outputs", "errors", "openmp", "json_object"}
NO_TORCH = {"api", "tool_guard", "tool_parsers", "engine", "spec_decode", "media"}
DEVICE_BLIND = ("models", "layers")
"""Packages that call the backend object they are given and never ask which device or CPU tier runs
(DESIGN.md, "Devices"): they import none of the modules that know it."""
DEVICE_MODULES = {"hearth.backends", "hearth.kernels.native", "hearth.kernels.tiers", "hearth.kernels.fused_layer",
                  "hearth.kernels.fused_lora",
                  "hearth.kernels.attention", "hearth.kernels.gpu"}
# engine talks to the runner only through its plain-data messages
NARROW = {(src, "runner"): {"hearth.runner.messages"} for src in ("engine", "spec_decode")}


def _package(module: str) -> str:
    top = module.split(".")[1] if module.count(".") else "__init__"
    return "entry" if top in ENTRY else top


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        yield ".".join(rel.parts), path


def test_every_package_is_placed():
    for module, _ in _modules():
        pkg = _package(module)
        assert pkg in ORDER or pkg in SHARED, f"{module}: package {pkg!r} has no place in the import order"


def test_imports_flow_one_way():
    problems = []
    for module, path in _modules():
        src = _package(module)
        for name in _imports(path):
            if name.split(".")[0] == "torch" and src in NO_TORCH:
                problems.append(f"{module} imports torch")
            if not name.startswith("hearth.") and name != "hearth":
                continue
            dst = _package(name) if name != "hearth" else "entry"
            if dst == src or dst in SHARED or src in SHARED and dst in SHARED:
                continue
            if src in SHARED:
                problems.append(f"{module} (shared) imports {name}")
            elif ORDER.index(dst) <= ORDER.index(src):
                problems.append(f"{module} ({src}) imports {name} ({dst}), which is above it")
            elif (src, dst) in NARROW and name not in NARROW[(src, dst)]:
                problems.append(f"{module} may import only {sorted(NARROW[(src, dst)])} from {dst}")
    assert not problems, "\n".join(problems)


def test_models_and_layers_never_ask_which_device_runs():
    problems = [f"{module} imports {name}" for module, path in _modules() if _package(module) in DEVICE_BLIND
                for name in _imports(path) if any(name == m or name.startswith(m + ".") for m in DEVICE_MODULES)]
    assert not problems, "\n".join(problems)


def test_the_commands_load_no_torch_before_they_must():
    """`hearth run`'s and `hearth serve`'s one-line refusals (a bad flag, a missing file) come before torch
    loads (~1.7 s): their modules import the model side only inside main (llm_vision's import had pulled
    hearth.backends, and torch, into `import hearth.commands.run`)."""
    import subprocess
    import sys

    code = ("import sys, hearth.commands.run, hearth.commands.serve, hearth.commands.vision_flags; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
