"""llama-server's --rope-scaling yarn --rope-scale F --yarn-orig-ctx N on `hearth run` and `hearth serve`:
EngineConfig.rope_scaling over the file's; a bad value is one line naming its flag, before any load."""

from __future__ import annotations

import math

import pytest

from hearth.cli import main
from hearth.llm import LLM
from tests.gguf_factory import write_tiny_gguf

BAD = [
    (["--rope-scaling", "none", "--rope-scale", "4"], "--rope-scale needs --rope-scaling yarn or linear"),
    (["--rope-freq-scale", "2"], "--rope-freq-scale must be in (0, 1] (the context is stretched 1/F times), not 2.0"),
    (["--rope-freq-scale", "0.5", "--rope-scale", "2"],
     "--rope-freq-scale F and --rope-scale 1/F set the same factor: give one"),
    (["--rope-scaling", "none", "--rope-freq-scale", "0.5"], "--rope-freq-scale needs --rope-scaling yarn or linear"),
    (["--rope-scale", "0.5"], "--rope-scale must be a factor of at least 1, not 0.5"),
    (["--rope-freq-base", "0"], "--rope-freq-base must be a positive base frequency, not 0.0"),
    (["--rope-freq-base", "-5"], "--rope-freq-base must be a positive base frequency, not -5.0"),
    (["--hf-overrides", "[1]"], "--hf-overrides must be a JSON object, not [1]"),
    (["--hf-overrides", '{"max_position_embeddings": 4}'], "--hf-overrides: hearth reads rope_parameters, "
     "rope_scaling, rope_theta (a GGUF's other settings are its own), not max_position_embeddings"),
    (["--hf-overrides", '{"rope_theta": 1e6}', "--rope-freq-base", "5"],
     "--hf-overrides sets the rope: drop --rope-freq-base"),
    (["--hf-overrides", '{"rope_parameters": {"rope_type": "yarn", "factor": 0.5}}'],
     "--hf-overrides: --rope-scale must be a factor of at least 1, not 0.5"),
    (["--hf-overrides", '{"rope_parameters": {"rope_type": "dynamic", "factor": 2}}'],
     "--hf-overrides: --rope-scaling must be yarn, linear or none, not dynamic"),
    (["--hf-overrides", '{"rope_theta": -1}'], "--hf-overrides: rope_theta must be a positive base frequency, not -1"),
    (["--rope-scaling", "linear", "--rope-scale", "2", "--yarn-beta-fast", "8"], "--yarn-beta-fast needs --rope-scaling yarn"),
    (["--rope-scaling", "linear"], "--rope-scaling linear needs --rope-scale (the factor the context is stretched by)"),
    (["--yarn-orig-ctx", "16"], "--yarn-orig-ctx needs --rope-scaling yarn or linear"),
    (["--rope-scaling", "yarn"], "--rope-scaling yarn needs --rope-scale (the factor the context is stretched by)"),
    (["--rope-scaling", "yarn", "--rope-scale", "0.5"], "--rope-scale must be a factor of at least 1, not 0.5"),
    (["--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "-2"],
     "--yarn-orig-ctx must be a number of tokens (0: the file's), not -2"),
    (["--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-beta-fast", "0"],
     "--yarn-beta-fast must be a positive number, not 0.0"),
]


@pytest.fixture
def no_model_load(monkeypatch):
    import hearth.llm

    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **k: pytest.fail("loaded a model for bad input"))


@pytest.mark.parametrize("command", ["run", "serve"])
@pytest.mark.parametrize("flags, line", BAD, ids=[" ".join(f) for f, _ in BAD])
def test_a_bad_rope_flag_is_one_line_before_the_load(command, flags, line, capsys, no_model_load):
    argv = [command, "no-such-model.gguf", *(["hi"] if command == "run" else ["--port", "0"]), *flags]
    assert main(argv) == 1
    assert capsys.readouterr().err.strip() == f"hearth: error: {line}"


def test_an_unknown_rope_scaling_is_argparse_s_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "m.gguf", "hi", "--rope-scaling", "dynamic"])
    assert e.value.code == 2 and "argument --rope-scaling: invalid choice: 'dynamic'" in capsys.readouterr().err


def test_run_passes_the_flags_to_the_engine(tmp_path, monkeypatch, capsys):
    import hearth.llm

    seen = {}

    def fake(model, **kw):
        seen.update(kw)
        raise SystemExit(0)
    monkeypatch.setattr(hearth.llm, "LLM", fake)
    with pytest.raises(SystemExit):
        main(["run", "m.gguf", "hi", "--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "32768"])
    assert seen["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


PASSED = [
    (["--rope-scale", "4"], {"factor": 4.0}, 0.0),  # llama-server: the file's kind
    (["--rope-freq-scale", "0.25"], {"factor": 4.0}, 0.0),
    (["--rope-scaling", "linear", "--rope-freq-scale", "0.5"], {"rope_type": "linear", "factor": 2.0}, 0.0),
    (["--rope-scaling", "none"], {"rope_type": "none"}, 0.0),
    (["--rope-freq-base", "500000"], None, 500000.0),
    (["--hf-overrides", '{"rope_parameters": {"rope_type": "yarn", "factor": 4.0, '
      '"original_max_position_embeddings": 32768, "rope_theta": 1000000}}'],
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 1e6),
    (["--hf-overrides", '{"rope_scaling": {"type": "linear", "factor": 2}, "rope_theta": 5e5}'],
     {"type": "linear", "factor": 2}, 5e5),
]


@pytest.mark.parametrize("flags, scaling, base", PASSED, ids=[" ".join(f)[:40] for f, _, _ in PASSED])
def test_serve_and_run_pass_the_rope_flags_to_the_engine(flags, scaling, base, monkeypatch):
    import hearth.llm
    from hearth.cli import command_parser
    from hearth.commands.serve import engine_args

    args = engine_args(command_parser("serve").parse_intermixed_args(["m.gguf", *flags]))
    assert (args["rope_scaling"], args["rope_freq_base"]) == (scaling, base)
    seen = {}

    def fake(model, **kw):
        seen.update(kw)
        raise SystemExit(0)
    monkeypatch.setattr(hearth.llm, "LLM", fake)
    with pytest.raises(SystemExit):
        main(["run", "m.gguf", "hi", *flags])
    assert (seen["rope_scaling"], seen["rope_freq_base"]) == (scaling, base)


def test_the_engines_yarn_stretches_a_plain_files_context(tmp_path):
    path = tmp_path / "plain.gguf"
    write_tiny_gguf(path, "qwen2", context=32)
    llm = LLM(str(path), progress=False, device="torch", num_kv_blocks=32,
              rope_scaling={"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 16})
    try:
        assert (llm.max_model_len, llm.model_config.rope_yarn.original_context) == (64, 16)
        rope = llm.model.layers[0].attn.rope
        assert rope.factors is not None and rope.factors.attn_factor == pytest.approx(1 + 0.1 * math.log(4))
    finally:
        llm.close()


def test_checks_before_the_load_read_the_stretched_context(tmp_path, monkeypatch, capsys):
    """K and the footprint are checked from the file's header before the weights load: against the context the
    rope scaling stretches (a 32-token file at yarn x 4: 128), not the file's own."""
    import hearth.llm
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.memory.gguf_shape import run_context
    from hearth.memory.serving import served_footprint

    path = tmp_path / "plain.gguf"
    write_tiny_gguf(path, "qwen2", context=32)
    yarn = {"rope_type": "yarn", "factor": 4}
    assert (run_context(GGUFFile(path)), run_context(GGUFFile(path), yarn)) == (32, 128)
    assert served_footprint(GGUFFile(path), 128, rope_scaling=yarn).context == 128
    monkeypatch.setattr(hearth.llm, "LLM", lambda model, **kw: (_ for _ in ()).throw(SystemExit(0)))
    spec = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 40}']
    with pytest.raises(SystemExit) as e:
        main(["run", str(path), "hi", "--ctx", "128", "--rope-scaling", "yarn", "--rope-scale", "4", *spec])
    assert e.value.code == 0  # reached the load
    assert main(["run", str(path), "hi", "--ctx", "128", *spec]) == 1  # unscaled, 40 drafts do not fit 32 tokens
    assert "num_speculative_tokens (40) must be below the context (32 tokens)" in capsys.readouterr().err
