"""A fused decoder layer runs only the ArchSpec it declares: every field, present and future (the
test iterates dataclasses.fields(ArchSpec)), is either declared by the fused C++ layer, and then set
away from its default by an architecture the fused-vs-op-by-op test runs, or refused with a reason
that names it, logged once; a refused model runs op by op."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import pytest

from hearth.kernels import native
from hearth.kernels.fused_layer import FusedLayer
from hearth.loader.gguf_loader import GGUFFile
from hearth.models import arch_spec
from hearth.models.arch_spec import ArchSpec, admits, refusal
from hearth.backends import select
from hearth.backends.base import TORCH_OPS
from hearth.models.registry import load_model, model_class
from tests.gguf_factory import tiny_dir
from tests.models.test_native_decode import FUSED_ARCHS

FIELDS = dataclasses.fields(ArchSpec)


def _other(value):
    """A value of the same type away from `value`."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "-other"
    raise AssertionError(f"ArchSpec field of type {type(value).__name__}: teach _other a value for it")


def test_every_declared_field_is_an_archspec_field():
    assert set(FusedLayer.IMPLEMENTS) <= {f.name for f in FIELDS}


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_each_field_is_declared_and_exercised_or_refused(field):
    spec = dataclasses.replace(ArchSpec(), **{field.name: _other(field.default)})
    reason = refusal(FusedLayer.NAME, FusedLayer.IMPLEMENTS, spec)
    allowed = FusedLayer.IMPLEMENTS.get(field.name, ())
    if field.name not in FusedLayer.IMPLEMENTS or allowed is not None and \
            getattr(spec, field.name) not in allowed:
        assert reason is not None and f"ArchSpec.{field.name}" in reason
        return
    assert reason is None
    # declared: some architecture the fused-vs-op-by-op test runs sets it away from its default
    specs = {arch: model_class(arch).spec for arch in FUSED_ARCHS}
    assert any(getattr(s, field.name) != field.default for s in specs.values()), \
        f"no architecture in test_native_decode.FUSED_ARCHS exercises ArchSpec.{field.name} on the fused layer"


def test_every_declared_value_is_exercised():
    for name, allowed in FusedLayer.IMPLEMENTS.items():
        if allowed is not None:
            seen = {getattr(model_class(arch).spec, name) for arch in FUSED_ARCHS}
            assert set(allowed) <= seen, (name, set(allowed) - seen)


@dataclass(frozen=True, slots=True)
class FutureSpec(ArchSpec):
    """ArchSpec with a field added after the fused layer was written."""

    parallel_block: bool = False


def test_a_new_field_is_refused_until_declared():
    assert refusal(FusedLayer.NAME, FusedLayer.IMPLEMENTS, FutureSpec()) is None  # at its default: runs
    reason = refusal(FusedLayer.NAME, FusedLayer.IMPLEMENTS, FutureSpec(parallel_block=True))
    assert reason is not None and "ArchSpec.parallel_block=True" in reason
    assert refusal("x", {**FusedLayer.IMPLEMENTS, "parallel_block": None}, FutureSpec(parallel_block=True)) is None


@pytest.mark.skipif(not native.available(), reason="native kernels do not run here")
def test_a_refused_model_runs_op_by_op_and_says_why_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(arch_spec, "_logged", set())
    cls = model_class("qwen3")  # 3 layers: one log line, not three
    monkeypatch.setattr(cls, "spec", FutureSpec(neox_rope=True, qk_norm=True, parallel_block=True))
    d, name, _ = tiny_dir(tmp_path, "qwen3", qtype="Q8_0")
    with caplog.at_level(logging.INFO, logger="hearth.models"):
        model, _ = load_model(GGUFFile(d / name), select())
        assert not admits(FusedLayer.NAME, FusedLayer.IMPLEMENTS, cls.spec)  # asked again: not logged again
    assert all(layer.ops is TORCH_OPS for layer in model.layers)  # the torch ops, over the native linears
    assert model.stack is None
    lines = [r.getMessage() for r in caplog.records if "parallel_block" in r.getMessage()]
    assert len(lines) == 1 and FusedLayer.NAME in lines[0]
