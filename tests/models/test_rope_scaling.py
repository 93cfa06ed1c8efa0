"""Rope scaling a GGUF declares: Llama 3.1's (rope_freqs.weight) and YaRN are computed (against
transformers in test_logits_vs_transformers' llama3-rope and qwen2-yarn cases); a type hearth does not
know keeps the context to the model's original length, said in one line, instead of running positions
past it wrongly. The engine's rope_scaling (llama-server's --rope-scaling yarn) overrides the file's."""

from __future__ import annotations

import logging

import pytest

from hearth.config import EngineConfig, YarnScaling, parse_rope_scaling
from hearth.errors import HearthError
from hearth.loader.gguf_loader import GGUFFile
from hearth.backends import select
from hearth.models.registry import load_model, model_class
from hearth.models.transformer import with_rope_scaling
from tests.gguf_factory import write_tiny_gguf
from tests.models.test_logits_vs_transformers import PagedDriver, prompt, rel_err


def config(path):
    g = GGUFFile(path)
    return model_class(g.arch).config_from_gguf(g)


def test_yarn_runs_the_files_whole_context(tmp_path, caplog):
    path = tmp_path / "yarn.gguf"
    write_tiny_gguf(path, "qwen2", context=256, yarn_original_context=64, yarn_betas=(16.0, 2.0))
    with caplog.at_level(logging.WARNING, logger="hearth"):
        cfg = config(path)
    assert cfg.context_length == 256
    assert cfg.rope_yarn == YarnScaling(4.0, 64, beta_fast=16.0, beta_slow=2.0)
    assert "not implemented" not in caplog.text


def test_an_unknown_scaling_keeps_the_original_context(tmp_path, caplog):
    path = tmp_path / "odd.gguf"
    write_tiny_gguf(path, "qwen2", context=256, yarn_original_context=64, yarn_type="dynamic")
    with caplog.at_level(logging.WARNING, logger="hearth"):
        assert config(path).context_length == 64
    assert "rope scaling 'dynamic' is not implemented: the context is kept to the model's original 64 tokens" in caplog.text


def test_linear_and_no_scaling_keep_the_files_context(tmp_path, caplog):
    for name, dims in (("plain", {}), ("linear", {"rope_scaling": 8.0})):
        write_tiny_gguf(tmp_path / f"{name}.gguf", "gemma3", context=256, **dims)
        with caplog.at_level(logging.WARNING, logger="hearth"):
            assert config(tmp_path / f"{name}.gguf").context_length == 256
    assert "not implemented" not in caplog.text


def test_the_engines_yarn_overrides_the_file(tmp_path):
    """llama-server's --rope-scaling yarn --rope-scale 4 on a plain file: 4x its context, trained at the file's."""
    write_tiny_gguf(tmp_path / "plain.gguf", "qwen2", context=256)
    cfg = with_rope_scaling(config(tmp_path / "plain.gguf"), parse_rope_scaling({"rope_type": "yarn", "factor": 4}))
    assert (cfg.context_length, cfg.rope_yarn) == (1024, YarnScaling(4.0, 256))
    y = parse_rope_scaling({"type": "yarn", "factor": 2.5, "original_max_position_embeddings": 32, "beta_fast": 8})
    assert y == YarnScaling(2.5, 32, beta_fast=8.0)
    assert with_rope_scaling(config(tmp_path / "plain.gguf"), y).context_length == 256  # the file's is larger


def test_the_engines_linear_scaling_runs_as_a_linear_file(tmp_path):
    """--rope-scaling linear --rope-scale 4 on a plain file: the logits of the same weights written with
    rope.scaling linear 4 (that file's rope is held to transformers' linear rope in test_logits_vs_transformers),
    4x the context; unscaled, the positions differ."""
    write_tiny_gguf(tmp_path / "plain.gguf", "qwen2", context=64)
    write_tiny_gguf(tmp_path / "linear.gguf", "qwen2", context=256, rope_scaling=4.0)
    linear = parse_rope_scaling({"rope_type": "linear", "factor": 4})
    assert with_rope_scaling(config(tmp_path / "plain.gguf"), linear).context_length == 256

    def logits(name, scaling=None):
        g = GGUFFile(tmp_path / name)
        model, cfg = load_model(g, select("torch"), rope_scaling=scaling)
        return PagedDriver(model, cfg).step({"s": prompt(cfg.vocab_size, 24)})["s"]
    want = logits("linear.gguf")
    assert rel_err(logits("plain.gguf", linear), want) < 1e-5
    assert rel_err(logits("plain.gguf"), want) > 1e-3


@pytest.mark.parametrize("scaling, line", [
    ({"rope_type": "dynamic", "factor": 2}, "--rope-scaling must be yarn, linear or none, not dynamic"),
    ({"rope_type": "linear", "factor": 2, "beta_fast": 8}, "--rope-scaling linear takes factor, original_max_position_embeddings, not beta_fast"),
    ({"rope_type": "yarn"}, "--rope-scaling yarn needs --rope-scale"),
    ({"rope_type": "yarn", "factor": 0.5}, "--rope-scale must be a factor of at least 1, not 0.5"),
    ({"rope_type": "yarn", "factor": "4"}, "--rope-scale must be a factor of at least 1, not 4"),
    ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": -1},
     "--yarn-orig-ctx must be a number of tokens (0: the file's), not -1"),
    ({"rope_type": "yarn", "factor": 4, "beta_slow": 0}, "--yarn-beta-slow must be a positive number, not 0"),
    ({"rope_type": "yarn", "factor": 4, "mscale": 1}, "--rope-scaling yarn takes factor"),
], ids=lambda v: str(v)[:30])
def test_a_bad_rope_scaling_is_one_line_naming_its_flag(scaling, line):
    with pytest.raises(HearthError, match="^" + line.replace("(", r"\(").replace(")", r"\)")):
        EngineConfig(rope_scaling=scaling)


def logits_of(path, scaling=None, base: float = 0.0):
    g = GGUFFile(path)
    model, cfg = load_model(g, select("torch"), rope_scaling=parse_rope_scaling(scaling), rope_freq_base=base)
    return PagedDriver(model, cfg).step({"s": prompt(cfg.vocab_size, 24)})["s"]


def test_rope_scale_alone_is_linear_on_a_file_without_scaling(tmp_path):
    """llama-server's --rope-scale 4 without --rope-scaling on a file that names no scaling type: llama.cpp reads
    the type as linear, so the positions are those of the same weights written with rope.scaling linear 4."""
    write_tiny_gguf(tmp_path / "plain.gguf", "qwen2", context=64)
    write_tiny_gguf(tmp_path / "linear.gguf", "qwen2", context=256, rope_scaling=4.0)
    cfg = with_rope_scaling(config(tmp_path / "plain.gguf"), parse_rope_scaling({"factor": 4}))
    assert (cfg.context_length, cfg.rope_scaling_factor, cfg.rope_yarn) == (256, 4.0, None)
    want = logits_of(tmp_path / "linear.gguf")
    assert rel_err(logits_of(tmp_path / "plain.gguf", {"factor": 4}), want) < 1e-5
    assert rel_err(logits_of(tmp_path / "plain.gguf"), want) > 1e-3


def test_rope_scale_alone_keeps_a_yarn_files_yarn_at_the_new_factor(tmp_path):
    """--rope-scale 2 alone on a YaRN x4 file: llama.cpp keeps the file's type and its yarn settings (betas), a
    new factor: the logits of the same weights written as YaRN x2 with those betas."""
    write_tiny_gguf(tmp_path / "x4.gguf", "qwen2", context=256, yarn_original_context=64, yarn_betas=(16.0, 2.0))
    write_tiny_gguf(tmp_path / "x2.gguf", "qwen2", context=128, yarn_original_context=64, yarn_betas=(16.0, 2.0))
    cfg = with_rope_scaling(config(tmp_path / "x4.gguf"), parse_rope_scaling({"factor": 2}))
    assert cfg.rope_yarn == YarnScaling(2.0, 64, beta_fast=16.0, beta_slow=2.0) and cfg.context_length == 256
    want = logits_of(tmp_path / "x2.gguf")
    assert rel_err(logits_of(tmp_path / "x4.gguf", {"factor": 2}), want) < 1e-5
    assert rel_err(logits_of(tmp_path / "x4.gguf"), want) > 1e-3


@pytest.mark.parametrize("scaled", [{"rope_scaling": 4.0}, {"yarn_original_context": 64}], ids=["linear", "yarn"])
def test_rope_scaling_none_drops_the_files_scaling(tmp_path, scaled):
    """--rope-scaling none (transformers' "default"): the positions of the same weights written without scaling;
    the file's context stays (llama.cpp's n_ctx_train)."""
    write_tiny_gguf(tmp_path / "plain.gguf", "qwen2", context=256)
    write_tiny_gguf(tmp_path / "scaled.gguf", "qwen2", context=256, **scaled)
    for none in ({"rope_type": "none"}, {"rope_type": "default"}):
        cfg = with_rope_scaling(config(tmp_path / "scaled.gguf"), parse_rope_scaling(none))
        assert (cfg.context_length, cfg.rope_scaling_factor, cfg.rope_yarn) == (256, 1.0, None)
    want = logits_of(tmp_path / "plain.gguf")
    assert rel_err(logits_of(tmp_path / "scaled.gguf", {"rope_type": "none"}), want) < 1e-5
    assert rel_err(logits_of(tmp_path / "scaled.gguf"), want) > 1e-3


@pytest.mark.parametrize("scaling", [None, {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64}],
                         ids=["unscaled", "yarn"])
def test_rope_freq_base_is_the_files_theta(tmp_path, scaling):
    """--rope-freq-base 500000 on a file of theta 10000: the positions of the same weights written with theta
    500000 (and a YaRN ramp placed by that base)."""
    write_tiny_gguf(tmp_path / "t1e4.gguf", "qwen2", context=256)
    write_tiny_gguf(tmp_path / "t5e5.gguf", "qwen2", context=256, rope_theta=500000.0)
    want = logits_of(tmp_path / "t5e5.gguf", scaling)
    assert rel_err(logits_of(tmp_path / "t1e4.gguf", scaling, 500000.0), want) < 1e-5
    assert rel_err(logits_of(tmp_path / "t1e4.gguf", scaling), want) > 1e-3


def write_sliding(path, arch):
    if arch == "gpt-oss":  # YaRN on every layer, every other one sliding
        from tests.gguf_gpt_oss import write_tiny_gpt_oss
        write_tiny_gpt_oss(path)
    elif arch == "phi3":  # LongRoPE, a window on every layer
        write_tiny_gguf(path, "phi3", context=256, longrope_original_context=64, sliding_window=128)
    else:
        write_tiny_gguf(path, arch)


@pytest.mark.parametrize("arch", ["gemma2", "gemma3", "gpt-oss", "phi3"])
def test_rope_freq_base_leaves_the_sliding_layers_base(tmp_path, arch):
    """llama.cpp gives sliding-window layers the file's base (rope_freq_base_train_swa) whatever --rope-freq-base
    says, and the model's factors (gpt-oss' YaRN): gemma3's own local base, the shared one of gemma2 and gpt-oss.
    phi3's window on every layer is no swa layer there: each takes the new base. The file's own base changes nothing."""
    write_sliding(tmp_path / "m.gguf", arch)
    g = GGUFFile(tmp_path / "m.gguf")
    file_model, file_cfg = load_model(g, select("torch"))
    model, cfg = load_model(g, select("torch"), rope_freq_base=123456.0)
    swa = [bool(s) and not all(cfg.sliding_window_pattern) for s in cfg.sliding_window_pattern]
    assert any(cfg.sliding_window_pattern) and any(swa) == (arch != "phi3")
    local = file_cfg.rope_local_theta or file_cfg.rope_theta
    assert [layer.attn.rope.base for layer in model.layers] == [local if s else 123456.0 for s in swa]
    for layer, file_layer, s in zip(model.layers, file_model.layers, swa):
        if s:
            assert layer.attn.rope.key == file_layer.attn.rope.key  # base, scale and factors
    assert rel_err(logits_of(tmp_path / "m.gguf", None, file_cfg.rope_theta), logits_of(tmp_path / "m.gguf")) < 1e-6


def test_the_engine_passes_rope_freq_base_and_rope_scale_alone(tmp_path):
    from hearth.llm import LLM
    from hearth.memory.gguf_shape import run_context

    write_tiny_gguf(tmp_path / "plain.gguf", "qwen2", context=32)
    assert run_context(GGUFFile(tmp_path / "plain.gguf"), {"factor": 4}) == 128
    llm = LLM(str(tmp_path / "plain.gguf"), progress=False, device="torch", num_kv_blocks=16, rope_freq_base=5e5,
              rope_scaling={"factor": 4})
    try:
        assert (llm.model_config.rope_theta, llm.model_config.rope_scaling_factor, llm.max_model_len) == (5e5, 4.0, 128)
    finally:
        llm.close()
    with pytest.raises(HearthError, match=r"^--rope-freq-base must be a positive base frequency \(0: the file's\), "
                                          r"not -1"):
        EngineConfig(rope_freq_base=-1)


def test_linear_scaling_reaches_phi3s_windowed_layers(tmp_path):
    """--rope-scaling linear --rope-scale 4 on phi3, whose files set a window on every layer (no swa layer in
    llama.cpp, one rotary in transformers): the logits of the same weights written with rope.scaling linear 4
    (held to transformers' linear rope in test_logits_vs_transformers' phi3-rope-scaled)."""
    write_tiny_gguf(tmp_path / "plain.gguf", "phi3", context=64, sliding_window=8)
    write_tiny_gguf(tmp_path / "linear.gguf", "phi3", context=256, rope_scaling=4.0, sliding_window=8)
    want = logits_of(tmp_path / "linear.gguf")
    assert rel_err(logits_of(tmp_path / "plain.gguf", {"rope_type": "linear", "factor": 4}), want) < 1e-5
    assert rel_err(logits_of(tmp_path / "plain.gguf"), want) > 1e-3


@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
@pytest.mark.parametrize("file_scale", [0.0, 2.0], ids=["plain", "linear2"])
def test_rope_scaling_leaves_the_sliding_layers_scale(tmp_path, arch, file_scale):
    """llama.cpp's swa layers keep the file's linear factor (rope_freq_scale_train_swa: gemma2's the file's, gemma3's
    1 with its own local base) whatever --rope-scaling says; the global layers take the flag's."""
    write_tiny_gguf(tmp_path / "m.gguf", arch, rope_scaling=file_scale)
    g = GGUFFile(tmp_path / "m.gguf")
    file_model, _ = load_model(g, select("torch"))
    model, cfg = load_model(g, select("torch"), rope_scaling=parse_rope_scaling({"rope_type": "linear", "factor": 4}))
    pattern = cfg.sliding_window_pattern
    assert any(pattern) and not all(pattern)
    file_sliding = 1.0 if arch == "gemma3" else file_scale or 1.0
    for layer, file_layer, sliding in zip(model.layers, file_model.layers, pattern):
        assert file_layer.attn.rope.scale == (file_sliding if sliding else file_scale or 1.0)
        assert layer.attn.rope.scale == (file_sliding if sliding else 4.0)
        if sliding:
            assert layer.attn.rope.key == file_layer.attn.rope.key
    none, _ = load_model(g, select("torch"), rope_scaling=parse_rope_scaling({"rope_type": "none"}))
    assert [layer.attn.rope.scale for layer in none.layers] == [file_sliding if s else 1.0 for s in pattern]
