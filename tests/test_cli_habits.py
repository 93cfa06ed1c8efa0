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


@pytest.mark.parametrize("argv,model,prompt", [
    (["m", "why", "is", "the", "sky", "blue"], "m", "why is the sky blue"),  # ollama run's unquoted words
    (["m", "why", "--temp", "0", "blue"], "m", "why blue"),
    (["-m", "x.gguf", "a", "b"], "x.gguf", "a b"),  # was "-m x.gguf names the model: give the prompt alone"
    (["m", "hi"], "m", "hi"),
    (["m"], "m", None),
])
def test_run_takes_the_prompt_s_words_unquoted(argv, model, prompt):
    """`hearth run m why is the sky blue` was "unrecognized arguments: is the sky blue"."""
    from hearth.cli import command_parser
    from hearth.commands.run_input import model_flag

    args = command_parser("run").parse_intermixed_args(argv)
    model_flag(args)
    assert (args.model, args.prompt) == (model, prompt)


def test_run_s_words_are_the_prompt_a_quoted_one_is(tiny_models, capsys):  # noqa: F811
    _, instruct = tiny_models
    assert main(["run", str(instruct), PROMPT, *GREEDY]) == 0
    quoted = capsys.readouterr().out
    assert main(["run", str(instruct), *PROMPT.split(), *GREEDY]) == 0
    assert capsys.readouterr().out == quoted


def test_an_answer_cut_at_the_default_max_tokens_says_so(tiny_models, capsys, monkeypatch):  # noqa: F811
    """hearth run's own cap (1024 tokens when -n is not given) cut an answer without a word."""
    import hearth.commands.run_answer as run_answer

    _, instruct = tiny_models
    monkeypatch.setattr(run_answer, "DEFAULT_MAX_TOKENS", 2)  # the tiny model's greedy answer is longer
    assert main(["run", str(instruct), PROMPT, "--temperature", "0", "--ctx", "256"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == ("hearth: the answer stopped at 2 tokens, the default --max-tokens (-n); -n N for a longer one, "
                       "-n -1 until an end token")
    assert main(["run", str(instruct), PROMPT, "--temperature", "0", "--ctx", "256", "-n", "2"]) == 0
    assert capsys.readouterr().err == ""  # asked for: llama-cli's silence


def test_cut_notice():
    from hearth.commands.run_answer import cut_notice

    assert cut_notice(8, structured=False) is None
    assert cut_notice(8, structured=True) == ("hearth: the answer stopped at --max-tokens 8 before its format was "
                                              "complete; raise -n")
    assert "the default --max-tokens" in cut_notice(None, structured=False)


def _output(argv):
    from hearth.cli import command_parser
    from hearth.commands.output_flags import structured_output

    return structured_output(command_parser("run").parse_intermixed_args(["m", "hi", *argv]))


def test_llama_cli_s_grammar_and_json_schema_flags(tmp_path):
    """llama-cli's --grammar was refused ("hearth run --format json for JSON"), its -j / --json-schema were
    unrecognized arguments; each is a StructuredOutput as a request's grammar or json_schema."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    (tmp_path / "g.gbnf").write_text('root ::= "yes" | "no"')
    for argv in (["-j", json.dumps(schema)], ["--json-schema", json.dumps(schema)],
                 ["-jf", str(tmp_path / "s.json")], ["--json-schema-file", str(tmp_path / "s.json")]):
        assert _output(argv).json_schema == schema
    for argv in (["--grammar", 'root ::= "yes" | "no"'], ["--grammar-file", str(tmp_path / "g.gbnf")]):
        assert _output(argv).grammar == 'root ::= "yes" | "no"'
    assert _output(["--format", "json"]).json_object and _output([]) is None


@pytest.mark.parametrize("argv,says", [
    (["--grammar", "root ::= ("], "--grammar: invalid grammar"),
    (["-j", '{"type": "nope"}'], "--json-schema: invalid json_schema: "),
    (["-j", "nope"], "--json-schema: not JSON (Expecting value): 'nope'"),
    (["-jf", "/nonexistent/s.json"], "--json-schema-file /nonexistent/s.json: No such file or directory"),
])
def test_a_bad_grammar_or_schema_is_one_line_naming_its_flag(argv, says):
    with pytest.raises(HearthError) as e:
        _output(argv)
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_run_holds_the_answer_to_a_grammar(tiny_models, capsys):  # noqa: F811
    _, instruct = tiny_models
    assert main(["run", str(instruct), PROMPT, *GREEDY, "--grammar", 'root ::= "yes" | "no"']) == 0
    assert capsys.readouterr().out in ("yes\n", "no\n")


def test_bench_takes_the_model_as_run_does_and_llama_bench_s_n(capsys):
    """`hearth bench smollm2-135m` and `-m` were unrecognized arguments, and `-n 8` said serve's
    --max-tokens-limit, which bench has not."""
    from hearth.cli import command_parser

    args = command_parser("bench").parse_intermixed_args(["m", "-n", "8"])
    assert (args.model_word, args.max_tokens) == ("m", 8)
    assert command_parser("bench").parse_intermixed_args(["-m", "m"]).model == "m"
    assert main(["bench", "a", "--model", "b"]) == 1
    assert capsys.readouterr().err == "hearth: error: MODEL 'a' and --model 'b' both name the model: give one\n"


def test_perplexity_takes_llama_perplexity_s_file_and_batch_flags():
    from hearth.cli import command_parser

    args = command_parser("eval", "perplexity").parse_intermixed_args(["m", "-f", "wiki.txt", "-b", "256"])
    assert (args.text, args.batch) == ("wiki.txt", 256)


@pytest.mark.parametrize("name,meant", [("smollm2", "smollm2-135m"), ("smollm2-135n", "smollm2-135m"),
                                        ("smollm2:135m", "smollm2-135m"), ("SmolLM2-135M", "smollm2-135m"),
                                        ("qwen2.5-coder", "qwen2.5-coder-0.5b or qwen2.5-coder-1.5b")])
def test_an_unknown_model_close_to_a_catalog_name_names_it(name, meant, tmp_path, monkeypatch):
    from hearth.errors import ModelNotFoundError
    from hearth.loader.resolve import resolve_model

    monkeypatch.chdir(tmp_path)  # no file of that name here
    with pytest.raises(ModelNotFoundError, match=f"^unknown model '{name}' \\(did you mean {meant}\\?\\): use "):
        resolve_model(name, download=False)
    with pytest.raises(ModelNotFoundError, match="^unknown model 'llama3': use "):
        resolve_model("llama3", download=False)


def test_sampling_params_given_as_a_dict_is_a_type_error_naming_them():
    """LLM.generate(prompts, {"max_tokens": 8}) was AttributeError: 'dict' object has no attribute 'pooling'."""
    from hearth.engine.engine_core import check_request

    with pytest.raises(TypeError, match="sampling params must be a hearth.SamplingParams .*, not dict$"):
        check_request([1, 2], {"max_tokens": 8}, 64, 100)


@pytest.mark.parametrize("kwargs,says", [
    ({"n_ctx": 512}, "n_ctx (LLM's max_model_len)"),  # llama-cpp-python's Llama(n_ctx=...)
    ({"model_path": "m.gguf"}, "model_path (LLM's model)"),
    ({"max_model_lenn": 512}, "max_model_lenn (did you mean max_model_len?)"),
    ({"gpu_memory_utilisation": 0.9}, "gpu_memory_utilisation (did you mean gpu_memory_utilization?)"),
])
def test_llm_s_unknown_argument_names_what_it_is_called_here(kwargs, says):
    """LLM(n_ctx=512) said only "unknown engine argument(s): n_ctx"; it fails before any model loads."""
    from hearth import LLM

    with pytest.raises(TypeError) as e:
        LLM("no-such-model", **kwargs)
    assert str(e.value) == f"unknown engine argument(s): {says}"


def test_stdin_that_is_not_utf8_is_one_line_naming_stdin(tmp_path, monkeypatch, capsys):
    """`hearth run m < photo.jpg` said "messages[0].content: holds a lone UTF-16 surrogate", the chat API's
    field, after the load; -f says "not UTF-8 text" and so does stdin now, before it."""
    import hearth.llm

    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **k: pytest.fail("loaded a model for bad input"))
    (tmp_path / "bin").write_bytes(b"ok \xff\xfe\xb2 then")
    with open(tmp_path / "bin", encoding="utf-8", errors="surrogateescape") as stdin:  # as Python's own stdin
        monkeypatch.setattr("sys.stdin", stdin)
        assert main(["run", "m.gguf"]) == 1
    assert capsys.readouterr().err == "hearth: error: stdin: not UTF-8 text\n"


def test_run_takes_stop_strings_and_ignore_eos_as_llama_cli_and_ollama_do():
    """llama-cli's -r/--reverse-prompt and --ignore-eos, ollama's stop, were unrecognized arguments."""
    from hearth.cli import command_parser
    from hearth.commands.run import sampling_params

    args = command_parser("run").parse_intermixed_args(["m", "hi", "-r", "User:", "--stop", "\n\n", "--ignore-eos"])
    params = sampling_params(args)
    assert (params.stop, params.ignore_eos) == (["User:", "\n\n"], True)
    params = sampling_params(command_parser("run").parse_intermixed_args(["m", "hi"]))
    assert (params.stop, params.ignore_eos) == ([], False)


def test_run_ends_the_answer_at_a_stop_string(tiny_models, capsys):  # noqa: F811
    _, instruct = tiny_models
    assert main(["run", str(instruct), PROMPT, *GREEDY]) == 0
    whole = capsys.readouterr().out.rstrip("\n")
    cut = whole[len(whole) // 2:][:2]  # two characters from its middle: the answer ends before them
    assert cut and main(["run", str(instruct), PROMPT, *GREEDY, "-r", cut]) == 0
    assert capsys.readouterr().out == whole[:whole.index(cut)] + "\n"


@pytest.mark.parametrize("flag,says", [
    (["-co"], "-co is llama-cli's colors: hearth prints plain text; ignored"),  # was read as -c o
    (["--color", "on"], "--color on is llama-cli's colors: hearth prints plain text; ignored"),
    (["--no-display-prompt"], "--no-display-prompt is llama-cli's: hearth run prints the answer only"),
    (["-e"], "-e is llama-cli's escapes"),
    (["-b", "512"], "-b 512 is llama.cpp's logical batch: hearth sizes a step's tokens itself; ignored"),
])
def test_llama_cli_s_display_flags_are_warnings(flag, says, capsys, monkeypatch):
    import hearth.commands.run as run

    started = []
    monkeypatch.setattr(run, "main", lambda args: started.append(args) or 0)
    assert main(["run", "m", "hi", *flag]) == 0 and started[0].ctx == 4096
    assert capsys.readouterr().err.startswith(f"hearth: warning: {says}")


def test_a_far_flag_gets_no_suggestion(capsys):
    """--color was "did you mean --lora?" (a cutoff of 0.75); a suggestion is for a typo only."""
    from hearth.cli import _closest_flag, command_parser

    flags = command_parser("run")._option_string_actions
    assert _closest_flag("unrecognized arguments: --colour", flags) == ""
    assert _closest_flag("unrecognized arguments: --min-keep 2", flags) == ""  # not --min-p
    assert _closest_flag("unrecognized arguments: --temperatur 2", flags) == "; did you mean --temperature?"


@pytest.mark.parametrize("name,hint", [
    ("serv", " (did you mean serve?)"), ("server", " (did you mean serve?)"), ("bnech", " (did you mean bench?)"),
    ("chat", " (vLLM's: hearth run MODEL chats in the terminal)"), ("frobnicate", ""),
    # were bare "unknown command"s: vllm collect-env (hearth doctor), llama-perplexity (hearth eval perplexity)
    ("collect-env", " (vLLM's: hearth doctor prints the versions, CPU tier, GPU, memory and models a bug report "
                    "needs)"),
    ("perplexity", " (llama.cpp's llama-perplexity: hearth eval perplexity MODEL (-f FILE, -c N, --chunks N))"),
])
def test_an_unknown_command_names_the_one_meant(name, hint, capsys):
    """`hearth server` (llama-server's name) and vLLM's `chat` were a bare "unknown command"."""
    from hearth.cli import COMMANDS

    assert main([name]) == 2
    assert capsys.readouterr().err == (f"hearth: error: unknown command {name!r}{hint}; commands: "
                                       f"{', '.join(COMMANDS)}\n")


@pytest.mark.parametrize("kwargs,says", [
    ({"max_model_len": "4k"}, "--ctx / --max-model-len must be an integer, got '4k'"),
    ({"threads": "2"}, "threads must be an integer, got '2'"),
    ({"kv_cache_memory_gb": "1"}, "kv_cache_memory_gb must be a number, got '1'"),
])
def test_llm_s_number_argument_of_another_type_names_it(kwargs, says):
    """LLM(max_model_len="4k") was TypeError "'>=' not supported between instances of 'str' and 'int'"."""
    from hearth import LLM

    with pytest.raises(HearthError) as e:
        LLM("no-such-model", **kwargs)
    assert str(e.value) == says


@pytest.mark.parametrize("model", [None, 5])
def test_llm_of_no_model_name_says_what_a_model_is(model):
    """LLM(None) was "expected str, bytes or os.PathLike object, not NoneType"."""
    from hearth import LLM

    with pytest.raises(HearthError, match=f"^model must be a catalog name, a .gguf path or org/repo:file.gguf, "
                                          f"not {model}$"):
        LLM(model)


@pytest.mark.parametrize("kwargs,field,why", [
    ({"top_p": "x"}, "top_p", "must be a number, got 'x'"),  # was "must be real number, not str"
    ({"max_tokens": "5"}, "max_tokens", "must be an integer, got '5'"),
    ({"seed": 1.5}, "seed", "must be an integer, got 1.5"),
])
def test_a_sampling_param_of_another_type_names_its_field(kwargs, field, why):
    from hearth.sampling_params import InvalidSamplingParams, SamplingParams

    with pytest.raises(InvalidSamplingParams) as e:
        SamplingParams(**kwargs)
    assert (e.value.field, e.value.why) == (field, why)


def test_numpy_numbers_are_numbers():
    import numpy as np

    from hearth.sampling_params import SamplingParams

    assert SamplingParams(max_tokens=np.int64(5), top_p=np.float32(0.5)).max_tokens == 5
