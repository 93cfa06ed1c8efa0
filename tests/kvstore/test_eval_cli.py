"""`hearth eval perplexity`: runs end to end on the shipped text, and bad input is a one-line error."""

from __future__ import annotations

from hearth.cli import main
from hearth.commands.eval import DEFAULT_TEXT, Perplexity, windows


def test_shipped_text_has_16k_tokens_of_public_domain_prose():
    assert DEFAULT_TEXT.exists() and (DEFAULT_TEXT.parent / "SOURCE.md").exists()
    assert len(DEFAULT_TEXT.read_text().split()) > 16_000 * 0.7  # ~29.7K SmolLM2 tokens, ~28.8K gemma3


def test_windows_and_llama_cpp_statistics():
    w = windows(list(range(10)), 4, bos=1)
    assert w == [[1, 1, 2, 3], [1, 5, 6, 7]]  # whole windows only, first token -> BOS
    r = Perplexity([1.0, 2.0, 3.0])
    assert abs(r.value - 7.389056) < 1e-5
    assert abs(r.stderr - r.value * (2 / 3 / 2) ** 0.5) < 1e-9  # ppl * sqrt(var / (n - 1))


def test_eval_perplexity_runs(model_path, capsys):
    rc = main(["eval", "perplexity", str(model_path("smollm2-135m")), "--ctx", "128", "--chunks", "2",
               "--kv-cache-dtype", "q8_0"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "[1]" in out.out and "[2]" in out.out and "Final estimate: PPL = " in out.out


def test_bad_input_is_one_line(model_path, capsys, tmp_path):
    assert main(["eval", "perplexity", str(model_path("smollm2-135m")), "--kv-cache-dtype", "int3"]) == 1
    assert "int3" in capsys.readouterr().err
    short = tmp_path / "short.txt"
    short.write_text("too short")
    assert main(["eval", "perplexity", str(model_path("smollm2-135m")), "--text", str(short)]) == 1
    assert "fewer than one window" in capsys.readouterr().err


def test_a_ctx_past_the_model_s_is_the_model_s_said_once(model_path, capsys, caplog, tmp_path):
    """As `run --ctx` (hearth.loader.context): the model's 8,192 in one line, then the eval goes on with
    it; it once said "using that" and then refused the --ctx it had just replaced."""
    short = tmp_path / "short.txt"
    short.write_text("too short")
    args = ["eval", "perplexity", str(model_path("smollm2-135m")), "--ctx", "99999", "--text", str(short)]
    with caplog.at_level("WARNING", logger="hearth"):
        assert main(args) == 1  # the text is shorter than one window of 8,192: that is the error, not --ctx
    notes = [r.getMessage() for r in caplog.records if "context" in r.getMessage()]
    assert notes == ["hearth: the model's context is 8,192 tokens; using that, not the 99,999 asked for"]
    err = capsys.readouterr().err
    assert "fewer than one window of 8192" in err and "longer than the model's context" not in err
