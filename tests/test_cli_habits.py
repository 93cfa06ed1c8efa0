"""What a user coming from llama.cpp, Ollama or vLLM typed in a trial of the CLI, and got a traceback, a page
of usage or a silent cut for: each case as it was found, run in process through the CLI's main."""

import json

import pytest

from hearth.cli import main
from hearth.errors import HearthError
from tests.test_cli import GREEDY, PROMPT, tiny_models  # noqa: F401 (a fixture)


@pytest.mark.parametrize("argv,line", [
    (["run", "m", "hi", "--tmep", "0.5"],
     "hearth run: error: unrecognized arguments: --tmep 0.5; did you mean --temp? (hearth run --help lists the options)"),
    (["serve", "--port", "abc"],
     "hearth serve: error: argument --port: invalid int value: 'abc' (hearth serve --help lists the options)"),
    (["run", "m", "hi", "--format", "yaml"],
     "hearth run: error: argument --format: invalid choice: 'yaml' (choose from 'json') (hearth run --help lists the "
     "options)"),
])
def test_a_flag_argparse_refuses_is_one_line(argv, line, capsys):
    """argparse printed the whole usage (30 lines for run, 60 for serve) above the line saying what was wrong."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and capsys.readouterr().err == line + "\n"


def test_ctrl_c_while_a_command_loads_its_modules_exits_130_quietly(monkeypatch, capsys):
    """Ctrl-C in the first second of `hearth serve` (its modules importing, before the command's own
    try) was a KeyboardInterrupt traceback of importlib's frames."""
    import hearth.cli

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(hearth.cli, "command_parser", interrupted)
    assert main(["serve"]) == 130
    assert capsys.readouterr().err == ""
