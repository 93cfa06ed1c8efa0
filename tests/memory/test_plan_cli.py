"""`hearth plan` from the command line: the report, --json, and one-line errors for bad input."""

from __future__ import annotations

import json

import pytest

from hearth.cli import main
from hearth.memory.weights import weight_bytes, tensors_from_gguf

JSON_KEYS = {"weight_bytes", "kv_bytes_per_token", "fits", "max_context", "max_concurrency",
             "decode_tok_s_ceiling", "prefill_tok_s_ceiling"}


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err.strip()


@pytest.mark.parametrize("ctx", [["--ctx", "2K"], ["-c", "2048"], ["--ctx-size", "2K"]])
def test_the_context_as_run_and_llama_cpp_spell_it(capsys, ctx):
    code, out, _ = run(capsys, "llama-7b", "--device", "h200", *ctx, "--json")
    assert code == 0 and json.loads(out)["inputs"]["ctx"] == 2048


def test_json_of_a_real_file(capsys, real_gguf):
    g = real_gguf("smollm2-135m")
    code, out, _ = run(capsys, str(g.path), "--device", "H200", "--ctx", "2048", "--concurrency", "4", "--json")
    data = json.loads(out)
    assert code == 0 and JSON_KEYS <= data.keys() and JSON_KEYS <= data["reasons"].keys()
    assert data["weight_bytes"] == weight_bytes(tensors_from_gguf(g))
    # 30 layers x 2 x 3 KV heads x 64 dims x 2 B = 23,040 B a token
    assert data["kv_bytes_per_token"] == 23040
    assert data["inputs"]["ctx"] == 2048 and data["inputs"]["concurrency"] == 4 and data["fits"] is True


def test_report_names_the_model_as_the_user_did_not_by_general_name(capsys, real_gguf):
    """The GGUF's general.name is a converter's title-cased directory name here."""
    g = real_gguf("smollm2-135m")
    assert g.get("general.name") == "Smollm2 135M 8k Lc100K Mix1 Ep2"
    for arg, shown in [(str(g.path), g.path.name), ("smollm2-135m", "smollm2-135m")]:
        code, out, _ = run(capsys, arg, "--device", "H200", "--ctx", "2048")
        assert code == 0 and out.splitlines()[0] == f"model     {shown} (llama, 30 layers)", out


def test_report_has_every_figure_with_a_reason(capsys):
    code, out, _ = run(capsys, "mixtral-8x7b", "--device", "m2-ultra", "--ctx", "8192", "--concurrency", "2",
                       "--kv-cache-dtype", "q8_0")
    assert code == 0
    for label in ("weights", "KV per token", "fits", "max context", "max concurrency", "decode", "prefill"):
        assert f"  {label} " in out
    assert "2 of 8 experts" in out


def test_description_on_the_command_line(capsys):
    code, out, _ = run(capsys, "layers=32,hidden=4096,heads=32,kv_heads=8,ffn=14336,vocab=128256,quant=Q8_0",
                       "--device", "rtx-4090", "--ctx", "4096", "--json")
    data = json.loads(out)
    assert code == 0 and data["inputs"]["arch"] == "described"
    assert data["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2


def test_a_ctx_past_the_model_s_is_the_model_s_with_serve_s_notice(capsys, caplog):
    """As `serve --max-model-len` and `run --ctx` (one helper): the model's 4,096, said in one line."""
    code, out, _ = run(capsys, "llama-7b", "--device", "h200", "--ctx", "1000000", "--json")
    assert code == 0 and json.loads(out)["inputs"]["ctx"] == 4096
    assert [r.getMessage() for r in caplog.records] == [
        "the model's context is 4,096 tokens; using that, not the 1,000,000 asked for"]


def test_device_cpu_is_this_machine_as_serve_s_device_cpu(capsys, monkeypatch):
    """`hearth serve --device cpu` runs on this machine's CPU; `hearth plan --device cpu` was "unknown device"."""
    import hearth.memory.this_machine as this_machine
    from hearth.memory.devices import PRESETS

    monkeypatch.setattr(this_machine, "this_device", lambda refresh=False: PRESETS["rtx-3090"])  # no measuring
    code, out, _ = run(capsys, "llama-7b", "--device", "cpu", "--json")
    assert code == 0 and json.loads(out)["inputs"]["device"] == PRESETS["rtx-3090"].name


def test_ctx_0_is_the_model_s_own_as_in_serve_and_run(capsys, caplog):
    """hearth.loader.context's one rule: --ctx 0 plans the model's 4,096 tokens, without a notice."""
    code, out, _ = run(capsys, "llama-7b", "--device", "h200", "--ctx", "0", "--json")
    assert code == 0 and json.loads(out)["inputs"]["ctx"] == 4096 and not caplog.records


@pytest.mark.parametrize("argv,needle", [
    (["llama-7b", "--device", "tpu"], "unknown device 'tpu'; known: this, h200"),
    # serve's --device cuda was "unknown device 'cuda'" with a list of names that said nothing of it
    (["llama-7b", "--device", "cuda"], "--device cuda: name the GPU's model for its figures (h200, h100-sxm, "
                                       "b200, a100-80gb, l40s, rtx-3090, rtx-4090, rtx-5090); this (or cpu): this "
                                       "machine's CPU, measured"),
    (["llama-7b", "--device", "h200", "--ctx", "-3"], "--ctx must be a number of tokens (0: the model's own), got -3"),
    (["llama-7b", "--device", "h200", "--concurrency", "0"], "--concurrency must be at least 1"),
    (["llama-7b", "--device", "h200", "--concurrency", "-2"], "--concurrency must be at least 1"),
    (["llama-7b", "--device", "h200", "--kv-cache-dtype", "int3"], "unknown KV cache dtype 'int3'"),
    # serve refuses f32: a plan for it was one no hearth runs (it was listed and priced)
    (["llama-7b", "--device", "h200", "--kv-cache-dtype", "f32"], "hearth does not serve the KV cache dtype 'f32'; "
                                                                  "known: auto, f16, bf16, fp8_e4m3, q8_0"),
    (["llama-7b", "--device", "h200", "--kv-cache-dtype", "kvarn_k4v2", "--block-size", "16"], "128 or 64"),
    (["llama-7b", "--device", "h200", "--memory-gib", "-1"], "--memory-gib must be positive"),
    # 0 was planned as the default 16 without a word (serve refuses it)
    (["llama-7b", "--device", "h200", "--block-size", "0"], "--block-size must be positive, got 0"),
    (["llama-7b", "--device", "h200", "--block-size", "-16"], "--block-size must be positive, got -16"),
    (["llama-7b,quant=Q3_X", "--device", "h200"], "unknown weight quantization 'Q3_X'"),
    (["layers=32,hidden=4096", "--device", "h200"], "description is missing heads, vocab"),
    (["llama-7b,heads=x", "--device", "h200"], "heads='x' is not a whole number"),
    (["llama-7b,colour=red", "--device", "h200"], "unknown description key 'colour'"),
    (["no-such-model", "--device", "h200"], "unknown model 'no-such-model'"),
    (["./missing.gguf", "--device", "h200"], "model file not found"),
])
def test_bad_input_is_one_line(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("hearth: error: ") and "Traceback" not in err
    assert needle in err, err


def test_plan_serve_and_eval_list_the_kv_formats_serve_builds():
    """One list: plan's help listed f32, which serve refuses (the planner's records price it)."""
    from hearth.cli import command_parser
    from hearth.kvstore.codecs import ALL_CODECS

    listed = f"auto (f16), {', '.join(ALL_CODECS)}"
    for name in (("plan",), ("serve",), ("eval", "perplexity")):
        text = " ".join(command_parser(*name).format_help().split())
        assert listed in text and "f32" not in text, name


def test_a_file_of_an_architecture_hearth_does_not_run_says_so(capsys, tmp_path):
    """A mamba GGUF was planned without a word; `hearth run` then refused it ("unsupported architecture")."""
    from dataclasses import replace

    import tests.gguf_factory as factory

    for arch, path in (("llama", tmp_path / "llama.gguf"), ("mamba", tmp_path / "mamba.gguf")):
        layouts = {**factory.LAYOUTS, "other": replace(factory.LAYOUTS["llama"], file_arch=arch)}
        dims = {**factory.DEFAULT_DIMS, "other": factory.DEFAULT_DIMS["llama"]}
        with pytest.MonkeyPatch.context() as m:
            m.setattr(factory, "LAYOUTS", layouts)
            m.setattr(factory, "DEFAULT_DIMS", dims)
            factory.write_tiny_gguf(path, "other")
        code, out, _ = run(capsys, str(path), "--device", "h200")
        first = out.splitlines()[0]
        assert code == 0 and first.startswith(f"model     {path.name} ({arch}, ")
        assert first.endswith("; hearth does not run mamba models: the figures are the file's sizes, for another "
                              "engine") == (arch == "mamba")
