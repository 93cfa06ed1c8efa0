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
    assert notes == ["the model's context is 8,192 tokens; using that, not the 99,999 asked for"]
    err = capsys.readouterr().err
    assert "fewer than one window of 8192" in err and "longer than the model's context" not in err


def test_ctx_0_is_the_model_s_own_as_llama_perplexity_s_and_serve_s(model_path, capsys, caplog, tmp_path):
    """llama-perplexity's -c 0 (and hearth serve's, run's, plan's --ctx 0) is the model's context: here it was
    "--ctx must be at least 16, not 0"."""
    short = tmp_path / "short.txt"
    short.write_text("too short")
    with caplog.at_level("WARNING", logger="hearth"):
        assert main(["eval", "perplexity", str(model_path("smollm2-135m")), "-c", "0", "--text", str(short)]) == 1
    assert not [r for r in caplog.records if "context" in r.getMessage()]  # asked for, so not said
    assert "fewer than one window of 8192" in capsys.readouterr().err


def test_a_negative_limit_is_every_window_as_llama_perplexity_s_minus_one():
    toks = list(range(12))
    assert windows(toks, 4, None, -1) == windows(toks, 4, None, 0) == [toks[0:4], toks[4:8], toks[8:12]]
    assert windows(toks, 4, None, 2) == [toks[0:4], toks[4:8]]


def test_bad_numbers_are_one_line_before_any_model_loads(capsys, tmp_path):
    """A trial once got "-1 windows" and a ZeroDivisionError (--chunks -1), `range() arg 3 must not be zero`
    (--batch 0) and a silently accepted --block-size 0. The model here does not exist: the flag is the error."""
    missing = str(tmp_path / "missing.gguf")
    cases = {("--chunks", "-2"): "--chunks must be a number of windows, or -1 or 0 for all, not -2",
             ("--batch", "0"): "--batch must be at least 1, not 0",
             ("--batch", "-5"): "--batch must be at least 1, not -5",
             ("--block-size", "0"): "--block-size must be at least 1, not 0",
             ("--block-size", "-16"): "--block-size must be at least 1, not -16",
             ("--ctx", "8"): "--ctx must be at least 16, or 0 for the model's own, not 8",
             ("--ctx", "-1"): "--ctx must be at least 16, or 0 for the model's own, not -1"}
    for flag, line in cases.items():
        assert main(["eval", "perplexity", missing, *flag]) == 1, flag
        assert capsys.readouterr().err.strip() == f"hearth: error: {line}"


def test_chunks_minus_one_and_zero_score_every_window(model_path, capsys, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(DEFAULT_TEXT.read_text()[:1500])  # a few windows of 128 tokens
    for chunks in ("-1", "0"):
        rc = main(["eval", "perplexity", str(model_path("smollm2-135m")), "--ctx", "128", "--text", str(text),
                   "--chunks", chunks, "--batch", "100"])
        out = capsys.readouterr()
        assert rc == 0, out.err
        n = int(out.err.split(" windows of ")[0].rsplit(" ", 1)[1])
        assert n >= 2 and f"[{n}]" in out.out and "Final estimate: PPL = " in out.out


def test_a_text_that_cannot_be_read_is_one_line_naming_it(capsys, tmp_path):
    """Was "cannot read text X: [Errno 2] No such file or directory: 'X'" (and a codec's repr for bytes)."""
    missing, binary = tmp_path / "none.txt", tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\xb2")
    for flags, line in ((["-f", str(missing)], f"--text {missing}: No such file or directory"),
                        (["--text", str(binary)], f"--text {binary}: not UTF-8 text")):
        assert main(["eval", "perplexity", str(tmp_path / "m.gguf"), *flags]) == 1
        assert capsys.readouterr().err == f"hearth: error: {line}\n"
