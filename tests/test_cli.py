import pytest

from hearth.cli import COMMANDS, main


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0
    assert f"hearth {name}" in capsys.readouterr().out


def test_no_command_prints_usage(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


def test_unknown_command(capsys):
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_run_defaults_to_the_default_model():
    from hearth.cli import command_parser
    from hearth.config import DEFAULT_MODEL
    from hearth.loader.catalog import CATALOG

    args = command_parser("run").parse_intermixed_args([])
    assert args.model == DEFAULT_MODEL and DEFAULT_MODEL in CATALOG


@pytest.mark.parametrize("name", ["run", "serve"])
def test_an_unknown_device_is_one_line_naming_the_choices(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "smollm2-135m", "--device", "tpu"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and "argument --device: invalid choice: 'tpu'" in err and "'cuda'" in err


@pytest.mark.parametrize("argv,needle", [
    (["--tool-guard", "strict"], "--tool-guard: unknown mode 'strict'; modes: guard, grammar, off"),
    (["--tool-guard-retries", "-1"], "--tool-guard-retries: must be in [0, 10], got -1"),
    (["--tool-guard-decline-below", "2"], "--tool-guard-decline-below: must be a number in [0, 1], got 2.0"),
])
def test_a_bad_tool_guard_is_one_line_before_the_load(argv, needle, capsys, monkeypatch):
    import hearth.llm

    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **k: pytest.fail("loaded a model for bad input"))
    assert main(["serve", "no-such-model.gguf", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hearth: error: ") and needle in err, err
