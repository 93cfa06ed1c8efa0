"""Triton's interpreter without its repeated module scans.

Before each launch, and again at every call of a @triton.jit helper inside a kernel (thousands per
model step), triton 3.9's interpreter re-patches triton.language: `_patch_builtin` walks
`inspect.getmembers` of each language module to find the builtins to wrap. The modules' builtin names
do not change, so they are listed once per module here; each call still wraps exactly the members that
are builtins at that moment, as the original does (measured: ~1/4 of the interpreted tests' time).
A helper's call inside a launch that already patched the language modules its globals see skips the
patching altogether: the launch's own scope restores the modules when it ends (another ~1/10).
Any other triton version keeps its own functions.

Whole-model tests in the interpreter run the GGUF matmul on tiles 4x wider (wide_tiles)."""

from __future__ import annotations

import inspect

import pytest
import triton
from triton.runtime import interpreter

import hearth.kernels.gpu.gguf_matmul as gm
from tests.gpu.test_triton_kernels import DEV


@pytest.fixture(autouse=True)
def wide_tiles(request, monkeypatch):
    """In the interpreter a program is a Python loop, so a matmul's time is its program count: tiles of 128
    output features take a quarter of 32's (measured 3.7-4.2x less CPU a matmul at decode and prefill shapes,
    ~1/3 of these tests' time). The same kernel code at another constexpr; the GPU's tiles, partial ones
    included, are held by the kernel tests (test_triton_kernels.py), which keep them."""
    if DEV == "cpu" and request.module.__name__ != "tests.gpu.test_triton_kernels":
        monkeypatch.setattr(gm, "TILE_N", 4 * gm.TILE_N)

_BUILTIN_NAMES: dict[int, tuple[object, list[str]]] = {}
"""id(module or class) -> (it, names of its members that are triton builtins when first scanned)."""


def _patch_builtin(pkg, builder, scope):
    held = _BUILTIN_NAMES.get(id(pkg))
    if held is None or held[0] is not pkg:
        names = [name for name, member in inspect.getmembers(pkg) if triton.language.core.is_builtin(member)]
        held = _BUILTIN_NAMES[id(pkg)] = (pkg, names)
    for name in held[1]:
        member = getattr(pkg, name)
        if triton.language.core.is_builtin(member):  # a nested helper's call finds them wrapped already
            interpreter._patch_attr(pkg, name, member, builder, scope)


_LANGS: dict[object, frozenset[int]] = {}
"""jit function -> ids of the language modules its globals see (the original's test, done once)."""
_patched: set[int] = set()
"""Ids of the language modules the running launch has patched; empty between launches."""
_original_patch_lang = interpreter._patch_lang


def _patch_lang(fn):
    langs = _LANGS.get(fn)
    if langs is None:
        langs = _LANGS[fn] = frozenset(id(v) for v in fn.__globals__.values()
                                       if inspect.ismodule(v) and v in (triton.language, triton.language.core))
    if _patched and langs <= _patched:  # a helper called inside a launch: already patched, restored by it
        return interpreter._LangPatchScope()
    scope = _original_patch_lang(fn)
    if not _patched:  # the launch's own scope: its restore ends the launch
        restore = scope.restore

        def restore_and_forget():
            restore()
            _patched.clear()

        scope.restore = restore_and_forget
    _patched.update(langs)
    return scope


if triton.__version__ == "3.9.0" and all(hasattr(interpreter, n) for n in ("_patch_attr", "_patch_builtin",
                                                                            "_patch_lang", "_LangPatchScope")):
    interpreter._patch_builtin = _patch_builtin
    interpreter._patch_lang = _patch_lang
