"""llama.cpp's samplers as flags: `hearth run` takes llama-cli's spellings (--repeat-last-n, --dry-multiplier,
--dry-sequence-breaker, --xtc-probability, --top-nsigma, ...), `hearth serve` the same as the server's defaults;
a bad value is one line naming the flag typed (--mirostat-lr, --mirostat-ent: llama-cli's eta and tau)."""

from __future__ import annotations

import pytest

from hearth.cli import command_parser, main
from hearth.errors import HearthError

LLAMA = ["--repeat-last-n", "128", "--dry-multiplier", "0.8", "--dry-base", "2", "--dry-allowed-length", "3",
         "--dry-penalty-last-n", "-1", "--xtc-probability", "0.5", "--xtc-threshold", "0.2", "--top-nsigma", "1.5",
         "--dry-sequence-breaker", "\\n", "--dry-sequence-breaker", "###", "--mirostat", "2", "--mirostat-lr", "0.2",
         "--mirostat-ent", "4"]
SET = {"repeat_last_n": 128, "dry_multiplier": 0.8, "dry_base": 2.0, "dry_allowed_length": 3, "dry_penalty_last_n": -1,
       "xtc_probability": 0.5, "xtc_threshold": 0.2, "top_n_sigma": 1.5, "dry_sequence_breakers": ["\n", "###"],
       "mirostat": 2, "mirostat_eta": 0.2, "mirostat_tau": 4.0}


@pytest.fixture
def no_model_load(monkeypatch):
    import hearth.llm

    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **k: pytest.fail("loaded a model for bad input"))


def test_run_takes_llama_cli_s_sampler_flags():
    from hearth.commands.run import sampling_params

    p = sampling_params(command_parser("run").parse_intermixed_args(["m", *LLAMA]))
    assert {k: getattr(p, k) for k in SET} == SET
    p = sampling_params(command_parser("run").parse_intermixed_args(["m", "--top-n-sigma", "1"]))
    assert (p.top_n_sigma, p.repeat_last_n, p.dry_sequence_breakers) == (1.0, None, ["\n", ":", '"', "*"])
    p = sampling_params(command_parser("run").parse_intermixed_args(["m", "--dry-sequence-breaker", "none"]))
    assert p.dry_sequence_breakers == []  # llama-cli's "none": no breakers


@pytest.mark.parametrize("argv,error", [
    (["--repeat-last-n", "-2"], "--repeat-last-n must be -1 (the whole context), 0 (off) or a number of tokens, got -2"),
    (["--dry-base", "0.5"], "--dry-base must be >= 1, got 0.5"),
    (["--xtc-probability", "2"], "--xtc-probability must be in [0, 1], got 2.0"),
    (["--top-n-sigma", "inf"], "--top-nsigma must be a finite number, got inf"),
    (["--mirostat", "3"], "--mirostat must be 0 (off), 1 or 2, got 3"),
    (["--mirostat-lr", "-1"], "--mirostat-lr must be >= 0, got -1.0"),
])
def test_a_bad_sampler_flag_is_one_line_naming_it(argv, error, capsys, no_model_load):
    assert main(["run", "no-such-model.gguf", "hi", *argv]) == 1
    assert capsys.readouterr().err.strip() == f"hearth: error: {error}"


def test_serve_takes_them_as_the_server_s_defaults(monkeypatch, capsys):
    import hearth.commands.serve
    from hearth.commands.serve import server_config

    started = []
    monkeypatch.setattr(hearth.commands.serve, "main", lambda args: started.append(args) or 0)
    assert main(["serve", "m", *LLAMA]) == 0 and capsys.readouterr().err == ""
    assert server_config(started[0]).sampling_defaults == SET
    assert main(["serve", "m", "--override-generation-config", '{"repeat_last_n": 32, "top_n_sigma": 1}']) == 0
    assert server_config(started[1]).sampling_defaults == {"repeat_last_n": 32, "top_n_sigma": 1.0}
    assert main(["serve", "m", "--dry-base", "0.5", "--dry-sequence-breaker", "none"]) == 0
    with pytest.raises(HearthError, match=r"^--dry-base must be >= 1, got 0.5$"):  # before any model loads
        server_config(started[2])
    started[2].default_dry_base = None
    assert server_config(started[2]).sampling_defaults == {"dry_sequence_breakers": []}


def test_an_integer_flag_takes_an_integral_float_as_llama_server_does(monkeypatch, capsys):
    """llama-server reads `--mirostat 2.0` (std::stoi) and hearth refused it; a fraction is named, where stoi would cut
    2.5 to 2 without a word."""
    import hearth.commands.serve
    from hearth.commands.run import sampling_params
    from hearth.commands.serve import server_config

    started = []
    monkeypatch.setattr(hearth.commands.serve, "main", lambda args: started.append(args) or 0)
    assert main(["serve", "m", "--mirostat", "2.0", "--top-k", "40.0", "--repeat-last-n", "-1.0"]) == 0
    assert server_config(started[0]).sampling_defaults == {"mirostat": 2, "top_k": 40, "repeat_last_n": -1}
    p = sampling_params(command_parser("run").parse_intermixed_args(["m", "--mirostat", "1.0", "--top-k", "5.0"]))
    assert (p.mirostat, p.top_k) == (1, 5)
    for command in ("serve", "run"):
        with pytest.raises(SystemExit):
            command_parser(command).parse_intermixed_args(["m", "--mirostat", "2.5"])
        assert "argument --mirostat: must be an integer, not '2.5'" in capsys.readouterr().err
