"""The speculative flags of `hearth run` and `hearth serve` are one set, parsed and checked by the same
code (hearth.commands.serve_speculation); K past the context is one line naming the flag (or the
field, in LLM(...)), before any weights load."""

from __future__ import annotations

import re

import pytest

from hearth.cli import command_parser, main
from hearth.commands.serve_speculation import speculative_config
from hearth.errors import HearthError
from tests.gguf_factory import SPECULATES, write_tiny_gguf
from tests.test_bad_input import assert_one_line_error, run_cli

GREEDY = ["--temperature", "0", "--max-tokens", "4"]


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.gguf"  # its context: 256 tokens
    write_tiny_gguf(path, "llama")
    return path


@pytest.fixture
def draft_here(tmp_path, monkeypatch):
    """d.gguf in the working directory: a draft model is found when the flags are read (the file's contents
    are read at the load, which these tests never reach)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.gguf").touch()


@pytest.mark.parametrize("argv", [
    ["-md", "d.gguf", "--spec-draft-n-max", "6"],
    ["--model-draft", "d.gguf", "--draft-max", "6"],
    ["--speculative-config", '{"method": "suffix"}'],
    ["--draft", "3"],
    ["--draft-n", "2"],
    [],
], ids=" ".join)
def test_run_takes_serve_s_speculative_flags(argv, draft_here):
    run = command_parser("run").parse_intermixed_args(["m.gguf", "hi", *argv])
    serve = command_parser("serve").parse_intermixed_args(["m.gguf", *argv])
    assert speculative_config(run) == speculative_config(serve)


def q8_model_and_spy(tmp_path, monkeypatch):
    """A tiny Q8_0 model (the native kernels verify rows bit for bit, so speculation runs) and the list
    of every LLM the command makes."""
    import hearth.llm

    path = tmp_path / "q8.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0", **SPECULATES)
    made = []

    class Spy(hearth.llm.LLM):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(hearth.llm, "LLM", Spy)
    return path, made


@pytest.mark.usefixtures("native_speculation")
def test_run_speculates_with_the_flags(capsys, monkeypatch, tmp_path):
    """Speculation runs (a Q8_0 model: the native kernels verify rows bit for bit), and greedy output
    with it equals greedy output without it."""
    path, made = q8_model_and_spy(tmp_path, monkeypatch)
    prompt = "one two one two one two one"
    assert main(["run", str(path), prompt, *GREEDY]) == 0
    plain = capsys.readouterr().out
    assert made[-1].engine.spec is None
    assert main(["run", str(path), prompt, *GREEDY, "--draft-max", "3"]) == 0
    assert capsys.readouterr().out == plain
    assert made[-1].engine.spec.config.num_speculative_tokens == 3 and made[-1].speculation_off == ""


@pytest.mark.parametrize("command", ["run", "serve"])
@pytest.mark.parametrize("argv,needle", [
    (["--spec-draft-n-max", "256"], "--spec-draft-n-max (256) must be below the context (256 tokens)"),
    # llama-server's spellings are named as typed, not as the long flag
    (["--draft-max", "1000"], "error: --draft-max (1000) must be below the context (256 tokens)"),
    (["--draft", "300"], "error: --draft (300) must be below the context (256 tokens)"),
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 300}'],
     "--speculative-config's num_speculative_tokens (300) must be below the context (256 tokens)"),
    (["--spec-draft-n-max", "0"], "error: --spec-draft-n-max must be at least 1 (draft tokens per step), got 0"),
    (["--draft-max", "0"], "error: --draft-max must be at least 1 (draft tokens per step), got 0"),
], ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_k_past_the_context_is_one_line_naming_the_flag(capsys, tiny, command, argv, needle):
    assert_one_line_error(*run_cli(capsys, command, str(tiny), *(["hi"] if command == "run" else []), *argv), needle)


@pytest.mark.usefixtures("native_speculation")
def test_a_default_k_past_the_context_is_lowered_to_fit_and_said_in_verbose(capsys, monkeypatch, tmp_path):
    """suffix's default K (64) at --ctx 64 failed with "the default num_speculative_tokens (64) must be
    below the context", a value the user never set: a default K is lowered to fit (said with --verbose);
    one the user gives still fails (test_k_past_the_context_is_one_line_naming_the_flag)."""
    path, made = q8_model_and_spy(tmp_path, monkeypatch)
    argv = ["run", str(path), "hi", *GREEDY, "--ctx", "64", "--speculative-config", '{"method": "suffix"}']
    assert main(argv) == 0
    assert made[-1].engine.spec.config.num_speculative_tokens == 63 and made[-1].speculation_off == ""
    assert main([*argv, "--verbose"]) == 0
    assert "drafts up to 63 tokens a step, not method suffix's default 64" in capsys.readouterr().err


@pytest.mark.usefixtures("native_speculation")
def test_llm_lowers_a_default_k_to_the_context(tmp_path, monkeypatch):
    from hearth.llm import LLM

    path, _ = q8_model_and_spy(tmp_path, monkeypatch)
    llm = LLM(str(path), max_model_len=3, speculative_config={"method": "ngram"})  # default K 4
    assert llm.engine.spec.config.num_speculative_tokens == 2


def test_k_past_the_context_of_a_models_file_entry_names_the_entry(capsys, tiny, tmp_path):
    toml = tmp_path / "models.toml"
    toml.write_text(f'[[models]]\nname = "t"\nmodel = "{tiny.name}"\n'
                    'speculative_config = { method = "ngram", num_speculative_tokens = 500 }\n')
    assert_one_line_error(*run_cli(capsys, "serve", "--models", str(toml)),
                          "models.toml: models[1] ('t'): speculative_config.num_speculative_tokens (500) must be below")


@pytest.mark.parametrize("ctx,k", [(64, 64), (0, 256)])
def test_llm_refuses_k_past_the_context_naming_the_field(tiny, ctx, k):
    from hearth.llm import LLM

    with pytest.raises(ValueError, match=rf"speculative_config\.num_speculative_tokens \({k}\) must be below the "
                                         rf"context \({ctx or 256} tokens\)"):
        LLM(str(tiny), max_model_len=ctx, speculative_config={"method": "ngram", "num_speculative_tokens": k})


def test_a_context_past_the_model_s_is_said_once_with_speculation(caplog, tiny):
    """The check before the load reads the context quietly: the load's warning stays the one line."""
    from hearth.llm import LLM

    with caplog.at_level("WARNING", logger="hearth"):
        LLM(str(tiny), max_model_len=4096, speculative_config={"method": "ngram", "num_speculative_tokens": 3})
    assert sum("the model's context is 256 tokens" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.usefixtures("native_speculation")
def test_run_verbose_says_what_speculation_drafted_and_accepted(capsys, monkeypatch, tmp_path):
    """As llama-speculative's n_drafted / n_accept: the --verbose line carries each answer's own drafts
    (the engine's counters run over the session), and nothing without speculation."""
    import io
    import re

    path, made = q8_model_and_spy(tmp_path, monkeypatch)
    prompt = "one two one two one two one two one two one"
    argv = ["run", str(path), "--raw", "--temperature", "0", "--max-tokens", "24", "--verbose"]
    assert main([*argv, prompt]) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "answer: 24 tokens" in line and "speculation" not in line
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{prompt}\n{prompt} two\n"))  # two answers, one session
    fixed = '{"method": "ngram", "num_speculative_tokens": 3, "cost_aware": false}'  # no timings: drafts every step
    assert main([*argv, "--speculative-config", fixed]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("prompt: ")]
    got = [re.search(r"answer: (\d+) tokens.*; speculation: (\d+) drafted, (\d+) accepted(?: \((\d+)%\))?(?:, acceptance length "
                     r"([\d.]+))?$", x) for x in lines]
    assert len(got) == 2 and all(got), lines
    (_, d1, a1, _, _), (n, d2, a2, share, length) = [m.groups() for m in got]
    s = made[-1].engine.spec.stats
    assert int(d1) + int(d2) == s.num_draft_tokens and int(a1) + int(a2) == s.num_accepted_tokens
    assert int(d1) > 0 and int(d2) > 0, lines  # each answer drafted: else the split could not be told
    assert share == f"{100 * int(a2) / int(d2):.0f}" and length == f"{int(n) / (int(n) - int(a2)):.2f}"


def test_run_verbose_says_why_the_policy_paused_drafting():
    """`hearth run m -md m --verbose` on a Zen 4 read "speculation: 0 drafted, 0 accepted" and no word of
    why (the cost rule priced the draft as not paying there): the paused steps are said, as hearth bench
    says them; a line without pauses is unchanged."""
    from types import SimpleNamespace

    from hearth.commands.run_answer import _speculation_text
    from hearth.spec_decode.policy import SpecDecodeStats

    before = SpecDecodeStats(num_paused_failing=1, num_paused_not_paying=2)
    spec = SimpleNamespace(stats=SpecDecodeStats(num_paused_failing=1, num_paused_not_paying=7))
    assert _speculation_text(before, spec, 5) == ("; speculation: 0 drafted, 0 accepted, acceptance length 1.00, "
                                                  "5 steps paused (0 as the drafts kept failing, 5 as they would "
                                                  "not pay on this machine)")
    spec = SimpleNamespace(stats=SpecDecodeStats(num_draft_tokens=4, num_accepted_tokens=2, num_paused_failing=1,
                                                 num_paused_not_paying=2))
    assert _speculation_text(before, spec, 5) == "; speculation: 4 drafted, 2 accepted (50%), acceptance length 1.67"


@pytest.mark.parametrize("argv, method", [
    (["--spec-type", "draft-mtp"], "mtp"),
    (["--spec-type", "draft-mtp", "--draft-max", "3"], "mtp"),
    (["--spec-type", "ngram-simple"], "ngram"),
    (["--spec-type", "ngram-mod"], "suffix"),  # n-grams across requests: argparse's "invalid choice"
    (["--spec-type", "ngram-cache"], "suffix"),
    (["--spec-type", "draft-simple", "-md", "d.gguf"], "draft"),
    (["--spec-type", "draft-mtp", "--speculative-config", '{"method": "mtp"}'], "mtp"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_llama_servers_spec_type_names_the_method(argv, method, draft_here):
    for name in ("run", "serve"):
        args = command_parser(name).parse_intermixed_args(["m.gguf", *(["hi"] if name == "run" else []), *argv])
        assert speculative_config(args)["method"] == method


@pytest.mark.parametrize("argv, says", [
    (["--spec-type", "draft-mtp", "-md", "d.gguf"], "--spec-type draft-mtp runs method mtp but -md runs method draft"),
    (["--spec-type", "draft-mtp", "--speculative-config", '{"method": "suffix"}'],
     "--spec-type draft-mtp runs method 'mtp' but --speculative-config gives method 'suffix'"),
    # was 'speculative_config.model is required with method "draft"', a key the user never typed
    (["--spec-type", "draft-simple"], "--spec-type draft-simple drafts with a draft model: add -md MODEL"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_spec_type_another_flag_contradicts_is_one_line(argv, says):
    args = command_parser("serve").parse_intermixed_args(["m.gguf", *argv])
    with pytest.raises(HearthError, match=re.escape(says)):
        speculative_config(args)
