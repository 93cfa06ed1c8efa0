import os
import subprocess
import sys

import pytest

from hearth.cli import COMMANDS, main
from hearth.errors import HearthError


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0
    assert f"hearth {name}" in capsys.readouterr().out


@pytest.mark.parametrize("sub,own,other", [("perplexity", "--kv-cache-dtype", "--router"),
                                           ("tools", "--router", "--kv-cache-dtype")])
def test_a_subcommand_prints_its_own_help(sub, own, other, capsys):
    """`hearth eval tools --help` lists tools' options, not perplexity's too (one combined help before)."""
    with pytest.raises(SystemExit) as e:
        main(["eval", sub, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith(f"usage: hearth eval {sub} ") and own in out and other not in out


def test_a_command_with_subcommands_lists_them(capsys):
    with pytest.raises(SystemExit) as e:
        main(["eval", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: hearth eval {perplexity,tools}") and "hearth eval COMMAND --help" in out
    assert main(["eval"]) == 2 and "perplexity" in capsys.readouterr().err
    assert main(["eval", "nope"]) == 2
    assert capsys.readouterr().err == "hearth: error: unknown eval command 'nope'; eval commands: perplexity, tools\n"


def test_cluster_serve_is_a_subcommand_with_its_own_usage(capsys):
    """`hearth cluster serve --help` said `usage: hearth cluster`, and a bad action was argparse's
    "argument action: invalid choice": now serve is a subcommand as eval's are."""
    with pytest.raises(SystemExit) as e:
        main(["cluster", "serve", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: hearth cluster serve ") and "--replicas" in out
    assert main(["cluster", "bogus"]) == 2
    assert capsys.readouterr().err == "hearth: error: unknown cluster command 'bogus'; cluster commands: serve\n"


@pytest.mark.parametrize("argv, line", [
    (["eval", "--limit", "2", "tools"], "options go after the eval command: hearth eval tools --limit 2"),
    (["cluster", "--replicas", "2", "serve", "m"], "options go after the cluster command: hearth cluster serve "
                                                   "--replicas 2 m"),
    (["eval", "--limit", "2"], "unknown eval command '--limit'; eval commands: perplexity, tools"),
])
def test_options_before_a_subcommand_say_where_they_go(argv, line, capsys):
    """`hearth eval --limit 2 tools` was "unknown eval command '--limit'"."""
    assert main(argv) == 2
    assert capsys.readouterr().err == f"hearth: error: {line}\n"


@pytest.mark.parametrize("argv", [["pull", "smollm2-135m"], ["run", "smollm2-135m", "hi"], ["doctor"]])
def test_an_unusable_hearth_home_is_one_line_before_any_work(argv, tmp_path, capsys, monkeypatch):
    """HEARTH_HOME naming a file was a NotADirectoryError traceback (after a minute of kernel build for run)."""
    import hearth.llm

    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **k: pytest.fail("loaded a model"))
    home = tmp_path / "f"
    home.write_text("")
    for at, reason in ((home, "it is a file"), (home / "sub", "a folder above it is a file")):
        monkeypatch.setenv("HEARTH_HOME", str(at))
        assert main(argv) == 1
        assert capsys.readouterr().err == (f"hearth: error: HEARTH_HOME ({at}) is not a folder hearth can write "
                                           f"to: {reason}; set HEARTH_HOME to one that is\n")


@pytest.mark.parametrize("argv", [["pull", "smollm2-135m"], ["plan", "smollm2-135m"], ["models"]])
def test_a_folder_of_hearth_home_that_is_a_file_is_one_line(argv, tmp_path, capsys, monkeypatch):
    """HEARTH_HOME/models (or tmp/, plan/ ...) a file was a NotADirectoryError or FileExistsError traceback at the
    command's first write into it."""
    from hearth.loader.store import HOME_FOLDERS

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    for name in HOME_FOLDERS:
        (tmp_path / name).write_text("")
        assert main(argv) == 1, name
        assert capsys.readouterr().err == (f"hearth: error: HEARTH_HOME ({tmp_path}): its {name}/ is not a folder "
                                           "hearth can write to: it is a file; remove it or make it this user's, or "
                                           "set HEARTH_HOME to another folder\n")
        (tmp_path / name).unlink()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_folder_of_hearth_home_this_user_cannot_write_is_one_line(tmp_path, capsys, monkeypatch):
    """models/ left read-only to this user (a `sudo hearth pull` makes it root's) was a PermissionError traceback."""
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    (tmp_path / "models").mkdir(mode=0o555)
    assert main(["pull", "smollm2-135m"]) == 1
    assert capsys.readouterr().err.startswith(f"hearth: error: HEARTH_HOME ({tmp_path}): its models/ is not a folder "
                                              "hearth can write to: it is not writable (Permission denied)")


@pytest.fixture
def no_model_load(monkeypatch):
    """Bad input is refused before any model loads: a load fails the test."""
    import hearth.llm

    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **k: pytest.fail("loaded a model for bad input"))


def test_no_command_prints_usage(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


@pytest.mark.parametrize("command,argv,field", [
    (("serve",), ["m"], "max_model_len"), (("cluster", "serve"), ["m"], "max_model_len"),
    (("run",), ["m", "hi"], "ctx"), (("eval", "perplexity"), ["m"], "ctx")])
def test_llama_cpp_s_context_flag_is_taken(command, argv, field):
    """`hearth serve m -c 4096` (llama-server's, llama-cli's and llama-perplexity's context flag) was
    "unrecognized arguments: -c 4096" (a new user's trial)."""
    from hearth.cli import command_parser

    for flag in ("-c", "--ctx-size"):
        assert getattr(command_parser(*command).parse_intermixed_args([*argv, flag, "512"]), field) == 512


@pytest.mark.parametrize("argv,says", [
    (["serve", "m", "-sm", "row"], "-sm is llama.cpp's GPU offload: hearth runs a whole model on one device, --device cuda"),
    (["serve", "m", "--tensor-parallel-size", "2"], "hearth cluster serve --replicas N"),
    (["serve", "-hf", "ggml-org/gemma-3-1b-it-GGUF"], "-hf is llama.cpp's Hugging Face download: give hearth the "
     "hub file as MODEL, org/repo:file.gguf"),  # was -h: the help, exit 0
    (["serve", "m", "-ctk", "q8_0", "-ctv", "q4_0"], "-ctk q8_0 -ctv q4_0: hearth keeps K and V in one format"),
    (["run", "m", "hi", "--cache-type-v=q4_0"], "--cache-type-v q4_0: hearth keeps K and V in one format"),
    (["pull", "m", "-ctk", "q8_0"], "-ctk q8_0 is llama.cpp's KV cache type: hearth's is serve's --kv-cache-dtype"),
    (["serve", "m", "-n", "128"], "-n is llama-server's default n_predict"),  # was -np 128: 128 slots
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_another_engines_flag_names_hearths_way(argv, says, capsys):
    """llama.cpp's and vLLM's flags from habit were argparse's bare "unrecognized arguments"."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("hearth: error: ") and says in err and err.count("\n") == 1, err


def _foreign_flags():
    from hearth.commands.foreign_flags import FOREIGN

    return sorted(FOREIGN.items())


@pytest.mark.parametrize("flag,does", _foreign_flags(), ids=[f for f, _ in _foreign_flags()])
def test_every_foreign_flag_is_one_line_naming_it_and_hearths_way(flag, does, capsys):
    """The whole table: each flag, with or without a value after it, is one line naming it and what hearth does."""
    for argv in (["serve", "m", flag], ["serve", "m", flag, "2"], ["serve", "m", f"{flag}=2"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err == f"hearth: error: {flag} is {does}\n", err


def test_a_foreign_flag_that_is_a_command_s_own_is_that_command_s():
    """hearth plan's --block-size and hearth pull's -q are theirs, not vLLM's."""
    from hearth.cli import command_parser
    from hearth.commands.foreign_flags import foreign_flag

    for command, flag in (("plan", "--block-size"), ("pull", "-q")):
        assert flag in command_parser(command)._option_string_actions
        assert foreign_flag(["x", flag], set(command_parser(command)._option_string_actions)) is None
    from hearth.commands.peer_values import PeerFlagError, translate

    with pytest.raises(PeerFlagError, match="--block-size 32: --block-size is vLLM's"):  # serve's is vLLM's
        translate(["x", "--block-size", "32"], set(command_parser("serve")._option_string_actions))


def _already():
    from hearth.commands.peer_flags import ALREADY, ALREADY_NAMED

    return [(flags, does) for flags, does in ALREADY.items()] + [(flags + ("x",), does)
                                                                 for flags, does in ALREADY_NAMED.items()]


@pytest.mark.parametrize("flags,does", _already(), ids=[f[0] for f, _ in _already()])
def test_a_flag_asking_what_hearth_does_already_is_taken_and_its_help_says_so(flags, does, capsys):
    """llama-server's --jinja, --metrics, ... and vLLM's --trust-remote-code, --enable-chunked-prefill, ... were
    "unrecognized arguments"; each is taken, by serve and run-batch, and --help says what hearth does."""
    from hearth.cli import command_parser

    for command in ("serve", "run-batch"):
        parser = command_parser(command)
        for flag in flags[:1]:
            assert flag in parser._option_string_actions and parser._option_string_actions[flag].help == does
    assert command_parser("serve").parse_intermixed_args(["m", *flags]).model == ["m"]
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert " ".join(does.split()[:4]) in " ".join(capsys.readouterr().out.split())


def test_llama_cpp_s_threads_flag_is_taken():
    from hearth.cli import command_parser

    assert command_parser("serve").parse_intermixed_args(["m", "-t", "3"]).threads == 3
    assert command_parser("run").parse_intermixed_args(["m", "hi", "-t", "3"]).threads == 3


@pytest.mark.parametrize("flag", ["-m", "--model"])
def test_llama_server_s_model_flag_is_the_model_not_a_draft(flag):
    """`hearth serve -m FILE` (llama-server's, vLLM's --model) was read as -md FILE: the default model served with
    FILE as its draft; `hearth run -m FILE hi` (llama-cli's) as the draft FILE and the model `hi`."""
    from hearth.cli import command_parser
    from hearth.commands.run_input import model_flag
    from hearth.commands.serve_models import entries

    args = command_parser("serve").parse_intermixed_args([flag, "x.gguf", "--port", "0"])
    assert [e.model for e in entries(args)] == ["x.gguf"] and args.model_draft is None
    args = command_parser("serve").parse_intermixed_args(["a.gguf", flag, "b.gguf"])
    assert [e.model for e in entries(args)] == ["b.gguf", "a.gguf"]  # -m's is the default model, as the peers
    args = command_parser("run").parse_intermixed_args([flag, "x.gguf", "hi there"])
    model_flag(args)
    assert (args.model, args.prompt, args.model_draft) == ("x.gguf", "hi there", None)
    args = command_parser("run").parse_intermixed_args([flag, "x.gguf"])
    model_flag(args)
    assert (args.model, args.prompt) == ("x.gguf", None)


def test_vllm_s_served_model_name_takes_several_names():
    """vLLM's `--served-model-name a b` (nargs +): both names for the one model; `b` was read as a second MODEL."""
    from hearth.cli import command_parser
    from hearth.commands.serve_models import entries

    for argv in (["m.gguf", "--served-model-name", "a", "b"], ["m.gguf", "--served-model-name", "a",
                                                               "--served-model-name", "b"]):
        (entry,) = entries(command_parser("serve").parse_intermixed_args(argv))
        assert (entry.model, entry.name, entry.aliases) == ("m.gguf", "a", ("b",))
    for model in ("m.gguf", "smollm2-135m", "org/repo:m.gguf"):  # MODEL written after the names: not an alias
        with pytest.raises(HearthError, match=f"^--served-model-name {model}: that is a model, not a name; "):
            entries(command_parser("serve").parse_intermixed_args(["--served-model-name", "a", model]))


def test_llama_server_s_parallel_slots_are_max_num_seqs():
    """llama-server's -np/--parallel N (its slots: sequences decoded together) was "unrecognized arguments"."""
    from hearth.cli import command_parser

    for flag in ("-np", "--parallel", "--max-num-seqs"):
        assert command_parser("serve").parse_intermixed_args(["m", flag, "4"]).max_num_seqs == 4


@pytest.mark.parametrize("value, tokens", [("8192", 8192), ("32k", 32000), ("32K", 32768), ("25.6k", 25600),
                                           ("1M", 1 << 20), ("auto", 0)])
def test_vllm_s_max_model_len_takes_its_human_readable_forms(value, tokens):
    """vLLM's --max-model-len 32k / 32K / auto (its human_readable_int) was argparse's "invalid int value"."""
    from hearth.cli import command_parser

    assert command_parser("serve").parse_intermixed_args(["m", "--max-model-len", value]).max_model_len == tokens


@pytest.mark.parametrize("value", ["1.5K", "32kb", "many", "infk"])
def test_a_bad_max_model_len_is_one_line_naming_it(value, capsys):
    with pytest.raises(SystemExit):
        main(["serve", "m", "--max-model-len", value])
    assert capsys.readouterr().err == (f"hearth serve: error: argument --max-model-len/--ctx/-c/--ctx-size: must be a "
                                       f"number of tokens (8192, 32k, 32K or auto), not {value!r} (hearth serve --help "
                                       "lists the options)\n")  # one line: the usage above it is gone


@pytest.mark.parametrize("value, gib", [("4294967296", 4.0), ("4G", 4.0), ("512M", 0.5), ("1g", 1e9 / 2**30)])
def test_vllm_s_kv_cache_memory_bytes_is_the_kv_budget(value, gib):
    """vLLM's --kv-cache-memory-bytes was unrecognized, and `--kv-cache-memory N` read as N GiB (an abbreviation
    of --kv-cache-memory-gb): now the bytes are the budget, and the short spelling is ambiguous, one line."""
    from hearth.cli import command_parser

    args = command_parser("serve").parse_intermixed_args(["m", "--kv-cache-memory-bytes", value])
    assert args.kv_cache_memory_gb == pytest.approx(gib)
    assert command_parser("serve").parse_intermixed_args(["m"]).kv_cache_memory_gb == 2.0


def test_kv_cache_memory_abbreviated_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "m", "--kv-cache-memory", "1000000"])
    assert "unrecognized arguments: --kv-cache-memory 1000000" in capsys.readouterr().err


def test_peer_spellings_of_serve_flags_are_taken():
    """vLLM's --enable-prefix-caching / --no-enable-prefix-caching, --uvicorn-log-level and --enable-auto-tool-choice
    and llama-server's -a/--alias A,B were "unrecognized arguments"; llama-server's --ctx-checkpoints is hearth's
    --state-snapshots."""
    from hearth.cli import command_parser
    from hearth.commands.serve import engine_args
    from hearth.commands.serve_models import entries
    from hearth.config import EngineConfig

    def parsed(*argv: str):
        return command_parser("serve").parse_intermixed_args(["m.gguf", *argv])
    assert [engine_args(parsed(*f))["enable_prefix_caching"] for f in
            ([], ["--enable-prefix-caching"], ["--no-enable-prefix-caching"], ["--no-prefix-caching"])] == \
        [True, True, False, False]
    assert [engine_args(parsed(*f))["state_snapshots"] for f in
            ([], ["--state-snapshots", "3"], ["--ctx-checkpoints", "0"])] == [8, 3, 0]  # llama-server's spelling
    with pytest.raises(HearthError, match="--state-snapshots must be a number of snapshots \\(0: none\\), not -1"):
        EngineConfig(**engine_args(parsed("--state-snapshots", "-1")))
    assert parsed("--uvicorn-log-level", "warning").log_level == "warning"
    assert parsed("--enable-auto-tool-choice").enable_auto_tool_choice
    for flag in ("-a", "--alias"):
        (entry,) = entries(parsed(flag, "chat, gpt-4o"))
        assert (entry.name, entry.aliases) == ("chat", ("gpt-4o",))


def test_llama_cli_s_n_predict_flag_is_taken():
    """`hearth run m -n 10` (llama-cli's answer length) was read as -no-cnv abbreviated and `10` as the
    prompt: raw completion of "10" for the default 1024 tokens, stdin ignored (a new user's trial)."""
    from hearth.cli import command_parser

    for flag in ("-n", "--n-predict"):
        args = command_parser("run").parse_intermixed_args(["m", flag, "10"])
        assert (args.max_tokens, args.mode, args.prompt) == (10, None, None)


def test_unknown_command(capsys):
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


@pytest.mark.parametrize("name,words", [("list", "hearth models lists"), ("ls", "hearth models lists"),
                                        ("rm", "delete that folder"), ("ps", "GET /v1/models"), ("show", "hearth plan")])
def test_an_ollama_command_names_hearths_way(capsys, name, words):
    """ollama's list / rm / ps / show, typed from habit, were a bare 'unknown command'."""
    assert main([name, "smollm2-135m"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hearth: error: unknown command {name!r} (ollama's: ") and words in err, err


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["run", "--help"]], ids=" ".join)
def test_a_reader_that_closed_stdout_early_ends_it_quietly(argv):
    """`hearth --help | head -1`: head exits after its line. Here the pipe's read end is closed before
    hearth writes anything, so every write fails (EPIPE), as late in the output as it may."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "hearth", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)
    # 1 as Python's docs advise; a command's --help is argparse's, which ignores the error itself (0)
    assert done.stderr == "" and done.returncode == (0 if argv[0] == "run" else 1)


BROKEN_OTHER_PIPE = """
import os, sys
import hearth.commands.models as command
from hearth.cli import main

def write_to_a_closed_pipe(args):  # as a bench talking to a server that went away
    read, write = os.pipe()
    os.close(read)
    os.write(write, b"x")

command.main = write_to_a_closed_pipe
code = main(["models"])
print("stdout still works")
sys.exit(code)
"""


def test_a_broken_pipe_other_than_stdout_is_an_error():
    """Only stdout's own reader going away is quiet: another pipe's BrokenPipeError is one error
    line and exit 1 (it was swallowed, with stdout pointed at devnull)."""
    done = subprocess.run([sys.executable, "-c", BROKEN_OTHER_PIPE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == "stdout still works\n"
    assert done.stderr.startswith("hearth: error: [Errno 32] Broken pipe") and done.stderr.count("\n") == 1


def test_a_broken_pipe_in_process_reports_it(monkeypatch, capsys):
    """In a caller's process (here under a capture with no descriptor) stdout is left alone."""
    import hearth.commands.models as command

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(command, "main", broken)
    assert main(["models"]) == 1
    assert capsys.readouterr().err == ("hearth: error: [Errno 32] Broken pipe (a connection or pipe hearth "
                                       "wrote to was closed)\n")


def test_run_defaults_to_the_default_model():
    from hearth.cli import command_parser
    from hearth.config import DEFAULT_MODEL
    from hearth.loader.catalog import CATALOG

    from hearth.commands.run_input import model_flag

    args = command_parser("run").parse_intermixed_args([])
    model_flag(args)  # MODEL or -m FILE, read when the command runs
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
def test_a_bad_tool_guard_is_one_line_before_the_load(argv, needle, capsys, no_model_load):
    assert main(["serve", "no-such-model.gguf", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hearth: error: ") and needle in err, err


def test_serve_max_logprobs_is_the_engines_and_a_bad_one_is_one_line_before_the_load(capsys, no_model_load):
    """vLLM's --max-logprobs (default 20, -1: no cap) reaches the LLM each served model is built with."""
    from hearth.cli import command_parser
    from hearth.commands.serve import engine_args

    assert engine_args(command_parser("serve").parse_args(["m"]))["max_logprobs"] == 20
    assert engine_args(command_parser("serve").parse_args(["m", "--max-logprobs", "-1"]))["max_logprobs"] == -1
    assert main(["serve", "no-such-model.gguf", "--max-logprobs", "-2"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "hearth: error: --max-logprobs must be a number of logprobs per token (-1: no cap), not -2", err


# ---- hearth run: chat with a model's own template, complete text without one (llama-cli's rule) ----

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
GREEDY = ["--temperature", "0", "--max-tokens", "6", "--ctx", "256"]
PROMPT = "the capital of france is"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """(base, instruct): tiny random llamas, without a chat template (a base model's GGUF) and with one."""
    from hearth.kernels import native
    from tests.gguf_factory import write_tiny_gguf

    native.lib()  # a first build's stderr line is said here, not in a test that reads stderr

    root = tmp_path_factory.mktemp("run")
    base, instruct = root / "base.gguf", root / "instruct.gguf"
    write_tiny_gguf(base, "llama")
    write_tiny_gguf(instruct, "llama", chat_template=TEMPLATE)
    return base, instruct


def greedy_text(path, ids_of) -> str:
    """The greedy 6-token continuation of ids_of(llm) by the library, as the reference for `hearth run`."""
    from hearth import LLM, SamplingParams

    llm = LLM(str(path), progress=False, max_model_len=256, max_num_seqs=1)
    params = SamplingParams(temperature=0, max_tokens=6)
    return llm.generate({"prompt_token_ids": ids_of(llm)}, params)[0].outputs[0].text


def as_text(llm, text=PROMPT):
    return llm.tokenizer.encode(text)  # what LLM.generate(text) runs


def as_chat(llm, text=PROMPT):
    return llm.encode_chat([{"role": "user", "content": text}])


def run_stdout(capsys, *argv) -> tuple[str, list[str]]:
    assert main(["run", *argv]) == 0
    out, err = capsys.readouterr()
    return out, err.splitlines()


def test_run_completes_the_prompt_of_a_model_without_a_template(tiny_models, capsys):
    base, _ = tiny_models
    text, chat = greedy_text(base, as_text), greedy_text(base, as_chat)
    assert text != chat  # else the test could not tell them apart
    out, err = run_stdout(capsys, str(base), PROMPT, *GREEDY)
    assert out == text + "\n"
    assert err == [f"hearth: {base} has no chat template: completing the prompt as text (--chat to chat in a built-in one)"]
    out, err = run_stdout(capsys, str(base), PROMPT, *GREEDY, "--chat")  # llama-cli's -cnv: the built-in template
    assert out == chat + "\n" and err == [f"hearth: {base} has no chat template: chatting in a built-in one for llama"]


def test_run_chats_with_a_model_s_own_template_unless_raw(tiny_models, capsys):
    _, instruct = tiny_models
    text, chat = greedy_text(instruct, as_text), greedy_text(instruct, as_chat)
    assert text != chat
    assert run_stdout(capsys, str(instruct), PROMPT, *GREEDY) == (chat + "\n", [])
    for raw in ("--raw", "-no-cnv"):  # llama-cli's spelling too
        assert run_stdout(capsys, str(instruct), PROMPT, *GREEDY, raw) == (text + "\n", [])


def test_run_with_a_prompt_reads_what_is_piped_first(tiny_models, capsys, monkeypatch, tmp_path):
    """`cat notes.md | hearth run m "summarize"` (ollama's and llm's habit): the piped text, then PROMPT, is
    the message; stdin was dropped without a word. A file redirected (`< notes.md`) reads the same."""
    _, instruct = tiny_models
    piped = "the notes say hello"
    expected = greedy_text(instruct, lambda llm: as_chat(llm, f"{piped}\n\n{PROMPT}"))
    assert expected != greedy_text(instruct, as_chat)
    read, write = os.pipe()
    os.write(write, f"{piped}\n".encode())
    os.close(write)
    with os.fdopen(read) as pipe:
        monkeypatch.setattr("sys.stdin", pipe)
        assert run_stdout(capsys, str(instruct), PROMPT, *GREEDY) == (expected + "\n", [])
    notes = tmp_path / "notes.md"
    notes.write_text(piped)
    with notes.open() as file:
        monkeypatch.setattr("sys.stdin", file)
        assert run_stdout(capsys, str(instruct), PROMPT, *GREEDY) == (expected + "\n", [])
    with open(os.devnull) as null:  # nothing piped: the prompt alone
        monkeypatch.setattr("sys.stdin", null)
        assert run_stdout(capsys, str(instruct), PROMPT, *GREEDY) == (greedy_text(instruct, as_chat) + "\n", [])


@pytest.mark.parametrize("model", [0, 1], ids=["base", "instruct"])
def test_run_without_a_prompt_reads_a_pipe_whole_as_one_prompt(model, tiny_models, capsys, monkeypatch):
    """`printf 'a\\nb\\nc\\n' | hearth run m`, as ollama run reads it: one prompt, one answer (each line was a turn)."""
    path = tiny_models[model]
    piped = "a\nb\nc"
    encode = as_chat if model else as_text
    expected = greedy_text(path, lambda llm: encode(llm, piped))
    read, write = os.pipe()
    os.write(write, f"{piped}\n".encode())
    os.close(write)
    with os.fdopen(read) as pipe:
        monkeypatch.setattr("sys.stdin", pipe)
        out, _ = run_stdout(capsys, str(path), *GREEDY)
    assert out == expected + "\n"


def test_interactive_run_completes_each_line_on_its_own_without_a_template(tiny_models, capsys, monkeypatch):
    import io

    base, _ = tiny_models
    lines = [PROMPT, "hello world"]
    expected = [greedy_text(base, lambda llm, t=t: as_text(llm, t)) for t in lines]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    out, err = run_stdout(capsys, str(base), *GREEDY)
    assert out == "".join(e + "\n" for e in expected)  # the second line is not continued from the first
    assert err == [f"hearth: {base} has no chat template: completing each line, on its own, as text "
                   "(--chat to chat in a built-in one)"]


def test_run_system_prompt_needs_a_chat(tiny_models, capsys, monkeypatch):
    import hearth.llm

    base, _ = tiny_models
    assert main(["run", str(base), PROMPT, "--system", "be brief", "--ctx", "256"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"hearth: error: {base} has no chat template, so --system has no place in its prompt: "
                   "add --chat to chat in a built-in template, or drop --system")
    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **k: pytest.fail("loaded a model for bad input"))
    assert main(["run", str(base), PROMPT, "--system", "be brief", "--raw"]) == 1
    assert capsys.readouterr().err.strip() == "hearth: error: --system is a chat's, and --raw completes text: drop one of them"
    with pytest.raises(SystemExit) as e:  # one mode or the other
        main(["run", str(base), PROMPT, "--raw", "--chat"])
    assert e.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("prompt", ["", "  \n"])
def test_run_an_empty_prompt_is_an_error_not_interactive(prompt, capsys, no_model_load):
    """`hearth run m ""` (a variable that expanded to nothing) went interactive; omitted, it still is."""
    assert main(["run", "no-such-model.gguf", prompt]) == 1
    assert capsys.readouterr().err.strip() == "hearth: error: the prompt is empty"

@pytest.mark.parametrize("argv,error", [
    (["--top-p", "1.5"], "--top-p must be in [0, 1], got 1.5"),
    (["--temperature", "-1"], "--temperature must be >= 0, got -1.0"),
    (["--max-tokens", "0"], "--max-tokens must be at least 1, or -1 / -2 (until an end token or the context is full), "
                            "got 0"),
])
def test_run_a_bad_sampling_flag_is_named_as_the_flag_before_the_load(argv, error, capsys, no_model_load):
    """The API's field names (top_p) are no flag of `hearth run`: the error names the flag typed."""
    assert main(["run", "no-such-model.gguf", "hi", *argv]) == 1
    assert capsys.readouterr().err.strip() == f"hearth: error: {error}"


def test_run_a_bad_kv_cache_dtype_is_one_line_before_the_load(capsys, no_model_load):
    assert main(["run", "no-such-model.gguf", "hi", "--kv-cache-dtype", "q5_9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hearth: error: --kv-cache-dtype: KV cache dtype 'q5_9' is not supported") and err.count("\n") == 1


def test_run_takes_llama_cli_s_kv_cache_types(tiny_models, capsys, monkeypatch):
    """-ctk bf16 -ctv bf16 (llama-cli's) run the answer over a bf16 KV cache, as --kv-cache-dtype bf16."""
    import hearth.llm

    _, instruct = tiny_models
    formats = []
    init = hearth.llm.LLM.__init__
    monkeypatch.setattr(hearth.llm.LLM, "__init__",
                        lambda self, *a, **k: (formats.append(k.get("kv_cache_dtype")), init(self, *a, **k))[1])
    out, err = run_stdout(capsys, str(instruct), PROMPT, *GREEDY, "-ctk", "bf16", "-ctv", "bf16")
    assert formats == ["bf16"] and out.strip()
    assert err == ["hearth: warning: -ctk bf16 -ctv bf16 is llama.cpp's KV cache type: --kv-cache-dtype bf16"]


def _interrupt_after_first_output(monkeypatch):
    """LLM.stream yields its first delta, then Ctrl-C lands (as a SIGINT mid-answer raises in the loop)."""
    import hearth.llm

    stream = hearth.llm.LLM.stream

    def interrupted(self, *a, **k):
        it = stream(self, *a, **k)
        yield next(it)
        it.close()
        raise KeyboardInterrupt

    monkeypatch.setattr(hearth.llm.LLM, "stream", interrupted)


def test_run_one_shot_exits_130_after_ctrl_c_mid_answer(tiny_models, capsys, monkeypatch):
    """A script tells an interrupted answer from a whole one: 130 (128 + SIGINT), as a shell's; 0 before."""
    _, instruct = tiny_models
    assert main(["run", str(instruct), PROMPT, *GREEDY]) == 0
    capsys.readouterr()
    _interrupt_after_first_output(monkeypatch)
    assert main(["run", str(instruct), PROMPT, *GREEDY]) == 130
    out, err = capsys.readouterr()
    assert out.endswith("\n") and "Traceback" not in err


def test_interactive_run_answers_an_unknown_command_without_the_model(tiny_models, capsys, monkeypatch):
    """As ollama: `/foo` is one line naming it and /help, not a message; `/ x` or a path is text."""
    import io

    base, _ = tiny_models
    texts = ["/src/app.py is a path", "/ slash"]
    expected = [greedy_text(base, lambda llm, t=t: as_text(llm, t)) for t in texts]
    monkeypatch.setattr("sys.stdin", io.StringIO("/foo\n/set x 1\n" + "\n".join(texts) + "\n"))
    out, err = run_stdout(capsys, str(base), *GREEDY)
    assert out == "".join(e + "\n" for e in expected)  # only the two texts were answered
    assert err[1] == "Unknown command '/foo'. Type /help for help"
    assert err[2].startswith("Unknown command '/set' (hearth run takes its settings as flags at start")


@pytest.mark.parametrize("command", ["/set parameter temperature 0.2", "/show info", "/load llama3", "/save s"])
def test_interactive_run_says_what_hearth_does_for_ollama_s_commands(command, tiny_models, capsys, monkeypatch):
    """ollama's /set, /show, /load, /save were a bare "Unknown command"."""
    import io

    from hearth.commands.run import OTHER_COMMANDS

    base, _ = tiny_models
    monkeypatch.setattr("sys.stdin", io.StringIO(command + "\n"))
    out, err = run_stdout(capsys, str(base), *GREEDY)
    word = command.split()[0]
    assert out == "" and err[1:] == [f"Unknown command '{word}' ({OTHER_COMMANDS[word]}). Type /help for help"]


def test_interactive_run_s_clear_says_so(tiny_models, capsys, monkeypatch):
    """As ollama's "Cleared session context": /clear said nothing."""
    import io

    _, instruct = tiny_models
    monkeypatch.setattr("sys.stdin", io.StringIO("/clear\n"))
    assert run_stdout(capsys, str(instruct), *GREEDY) == ("", ["Cleared session context"])


def test_interactive_run_reads_a_fenced_block_as_one_message(tiny_models, capsys, monkeypatch):
    """ollama's \"\"\" fences: the lines between them are one message (a pasted block was a message per line)."""
    import io

    base, _ = tiny_models
    block = "def f(x):\n    return x"
    expected = greedy_text(base, lambda llm: as_text(llm, block))
    monkeypatch.setattr("sys.stdin", io.StringIO(f'"""def f(x):\n    return x"""\n"""\n{block}\n"""\n'))
    out, err = run_stdout(capsys, str(base), *GREEDY)
    assert out == f"{expected}\n{expected}\n" and err[1:] == []  # two messages, each the whole block


def test_run_says_when_the_context_filled_and_the_answer_stopped(tiny_models, capsys, monkeypatch):
    """With a small --ctx the answer ran into the context's end and stopped mid-sentence silently;
    now one line says so and how to go on. max_tokens' stop says nothing (the tests above: err == [])."""
    import io

    _, instruct = tiny_models
    full = "hearth: the context (64 tokens) is full, so the answer stopped there"
    small = ["--temperature", "0", "--ctx", "64"]  # no --max-tokens: the room left caps the answer
    out, err = run_stdout(capsys, str(instruct), PROMPT, *small)
    assert err == [f"{full}; run with a larger --ctx"]
    monkeypatch.setattr("sys.stdin", io.StringIO("hello there\nsecond\n"))
    assert main(["run", str(instruct), *small]) == 1  # piped: a line that got no answer fails the run
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"{full}; /clear to start over, or run with a larger --ctx"
    assert err[1].startswith("hearth: error: prompt is ") and len(err) == 2  # the turn kept, nothing dropped


def test_run_n_minus_one_or_two_runs_until_the_context_is_full(tiny_models, capsys, monkeypatch):
    """llama-cli's `-n -1` (until an end token) and `-n -2` (until the context is full) were a refusal
    ("--max-tokens must be at least 1"); now each takes all the room left, past the default cap."""
    _, instruct = tiny_models
    monkeypatch.setattr("hearth.commands.run_answer.DEFAULT_MAX_TOKENS", 4)
    greedy = ["--temperature", "0", "--ctx", "64"]
    out, err = run_stdout(capsys, str(instruct), PROMPT, *greedy)
    assert err == ["hearth: the answer stopped at 4 tokens, the default --max-tokens (-n); -n N for a longer one, "
                   "-n -1 until an end token"]  # the default cap (4 here) stops it, before the context's end
    for n in ("-1", "-2"):
        long, err = run_stdout(capsys, str(instruct), PROMPT, *greedy, "-n", n)
        assert len(long) > len(out) and long.startswith(out.rstrip("\n"))
        assert err == ["hearth: the context (64 tokens) is full, so the answer stopped there; run with a larger --ctx"]
    assert main(["run", str(instruct), PROMPT, *greedy, "-n", "-3"]) == 1
    assert capsys.readouterr().err == ("hearth: error: --max-tokens must be at least 1, or -1 / -2 (until an end "
                                       "token or the context is full), got -3\n")


def test_run_max_tokens_that_leaves_no_room_for_a_prompt_is_one_line_before_any(tiny_models, capsys, monkeypatch):
    """`printf 'hello\\n' | hearth run m --ctx 64 --max-tokens 100` failed the line and exited 0:
    now it is refused at the start, naming both flags; a piped line that fails exits 1 (above)."""
    import io

    _, instruct = tiny_models
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    for argv in ([], [PROMPT]):
        assert main(["run", str(instruct), *argv, "--ctx", "64", "--max-tokens", "64"]) == 1
        out, err = capsys.readouterr()
        assert out == "" and err == ("hearth: error: --max-tokens 64 leaves no room for a prompt in the context of "
                                     "64 tokens (--ctx); lower --max-tokens or raise --ctx\n")
    assert main(["run", str(instruct), PROMPT, "--ctx", "64", "--max-tokens", "100", "--temperature", "0"]) == 1
    assert "--max-tokens 100 leaves no room" in capsys.readouterr().err

# ---- hearth serve: a port in use is one line, before the model loads ----

@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_serve_on_a_port_in_use_is_one_line_before_the_load(tiny_models, host, capsys, monkeypatch):
    import socket

    import hearth.llm

    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **k: pytest.fail("loaded a model for a port in use"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(tiny_models[0]), "--host", host, "--port", str(port)]) == 1
    assert capsys.readouterr().err.strip() == f"hearth: error: port {port} on {host} is already in use"


def test_serve_port_check_binds_a_free_port_and_lets_it_go():
    import socket

    from hearth.commands.serve import check_port

    with socket.socket() as probe:  # a port free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    check_port("127.0.0.1", port)
    check_port("127.0.0.1", port)  # let go: free again
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_serve_on_a_host_that_is_not_here_is_one_line(capsys):
    from hearth.commands.serve import check_port
    from hearth.errors import HearthError

    with pytest.raises(HearthError, match="cannot listen on port 8123 on 192.0.2.1: "):  # TEST-NET-1: never local
        check_port("192.0.2.1", 8123)


# ---- hearth --version, --threads ----

@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_is_one_line_with_torch_s(flag, capsys):
    from importlib import metadata

    import hearth

    assert main([flag]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"hearth {hearth.__version__} (torch {metadata.version('torch')}, python ")
    assert len(out.splitlines()) == 1


def test_the_package_version_is_hearth_s():
    """pyproject.toml reads the version from hearth.__version__: one place."""
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hearth.__version__"}


def test_threads_0_is_torch_s_default_and_says_so(tiny_models, capsys):
    import torch

    from hearth.cli import command_parser
    from hearth.config import THREADS_ZERO

    for name in (("run",), ("serve",), ("eval", "perplexity"), ("eval", "tools"), ("bench",)):
        assert THREADS_ZERO in " ".join(command_parser(*name).format_help().split()), name
    before = torch.get_num_threads()
    run_stdout(capsys, str(tiny_models[0]), PROMPT, *GREEDY, "--threads", "0")
    assert torch.get_num_threads() == before  # left as torch chose it
    assert main(["run", str(tiny_models[0]), PROMPT, "--threads", "-2"]) == 1
    assert capsys.readouterr().err.strip() == "hearth: error: --threads must be a number of threads (0: torch's default), not -2"


def test_threads_minus_1_is_llama_cpp_s_default_as_0():
    """llama.cpp's -t default is -1 (every core): a pasted `llama-server -t -1` line was an error here."""
    from hearth.cli import command_parser

    for name, flag in ((("run",), "-t"), (("serve",), "-t"), (("eval", "perplexity"), "--threads"),
                       (("eval", "tools"), "--threads"), (("bench",), "--threads")):
        parser = command_parser(*name)
        assert parser.parse_args([flag, "-1"]).threads == 0, name
        assert parser.parse_args([flag, "3"]).threads == 3, name
        assert "-1: llama.cpp's spelling of the same" in " ".join(parser.format_help().split()), name


def test_serve_log_level_reaches_hearths_own_loggers(capsys, no_model_load):
    """/infill's "dropped to fit" (hearth.api, info) printed nothing under `hearth serve`: uvicorn's
    --log-level configured only uvicorn's loggers."""
    import logging

    from hearth.cli import command_parser
    from hearth.commands.logs import configure_logging

    assert "(default: info)" in " ".join(command_parser("serve").format_help().split())
    assert main(["serve", "no-such-model.gguf", "--log-level", "debug"]) == 1
    assert logging.getLogger("hearth").level == logging.DEBUG
    capsys.readouterr()
    configure_logging("info")
    configure_logging("info")  # once more: still one line per record
    logging.getLogger("hearth.api").info("/infill: dropped %d tokens", 7)
    logging.getLogger("hearth.api").debug("not at info")
    err = capsys.readouterr().err
    assert err.count("/infill: dropped 7 tokens") == 1 and "INFO" in err and "not at info" not in err, err


def test_help_and_version_are_commands_too(capsys):
    """ollama's `help` and `version` were "unknown command"."""
    assert main(["version"]) == 0 and capsys.readouterr().out.startswith("hearth ")
    assert main(["help"]) == 0 and "commands" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["help", "serve"])
    assert e.value.code == 0 and "usage: hearth serve" in capsys.readouterr().out


def test_llama_cli_s_prompt_flags_and_samplers(tiny_models, capsys, tmp_path):
    """llama-cli's -p PROMPT, -f FILE, -sys and its samplers (--top-k, --min-p, --repeat-penalty) were
    unrecognized arguments."""
    _, instruct = tiny_models
    chat = greedy_text(instruct, as_chat)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(PROMPT)
    for given in (["-p", PROMPT], ["--prompt", PROMPT], ["-f", str(prompt)]):
        assert run_stdout(capsys, "-m", str(instruct), *given, *GREEDY) == (chat + "\n", [])
    assert main(["run", str(instruct), "hi", "-p", "there"]) == 1
    assert capsys.readouterr().err == "hearth: error: PROMPT and -p both give the prompt: give one\n"
    assert main(["run", str(instruct), "-f", str(tmp_path / "none.txt")]) == 1
    assert "-f " in capsys.readouterr().err
    from hearth.cli import command_parser
    from hearth.commands.run import sampling_params

    args = command_parser("run").parse_intermixed_args(["m", "--top-k", "40", "--min-p", "0.05", "--repeat-penalty",
                                                       "1.1", "-sys", "be brief", "--presence-penalty", "0.5"])
    p = sampling_params(args)
    assert (p.top_k, p.min_p, p.repetition_penalty, p.presence_penalty, args.system) == (40, 0.05, 1.1, 0.5, "be brief")
    assert main(["run", str(instruct), "hi", "--min-p", "2"]) == 1
    assert capsys.readouterr().err.startswith("hearth: error: --min-p ")


@pytest.mark.parametrize("argv,field,value", [
    (["serve", "m", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"], "tool_call_parser", "hermes"),
    (["run", "m", "hi", "-s", "42"], "seed", 42),  # llama-cli's seed: was read as -sys, the system prompt "42"
    (["run", "m", "hi", "--temp", "0.2"], "temperature", 0.2),
    (["run", "m", "hi", "-c", "32k"], "ctx", 32000),
    (["serve", "m", "-c4096"], "max_model_len", 4096),  # a short flag's attached value still parses
])
def test_peer_spellings_are_read_as_the_peers_mean_them(argv, field, value):
    from hearth.cli import command_parser

    assert getattr(command_parser(argv[0]).parse_intermixed_args(argv[1:]), field) == value


def test_no_flag_is_read_as_an_abbreviation_of_another(capsys):
    """argparse took `-n 128` for -np (slots) and `-s 42` for -sys: no abbreviations at all now."""
    from hearth.cli import command_parser

    for command, arg in (("serve", "--max-num"), ("run", "--sys"), ("run", "--temper")):
        with pytest.raises(SystemExit):
            command_parser(command).parse_intermixed_args(["m", arg, "1"])
        assert "unrecognized arguments" in capsys.readouterr().err


def test_llama_servers_pooling_rank_is_reranking():
    from hearth.cli import command_parser

    args = command_parser("serve").parse_intermixed_args(["m", "--pooling", "rank"])
    assert args.reranking and args.pooling is None
    args = command_parser("serve").parse_intermixed_args(["m", "--pooling", "mean"])
    assert not args.reranking and args.pooling == "mean"


def test_a_root_path_without_its_slash_and_ollamas_v(capsys):
    from hearth.cli import command_parser

    assert command_parser("serve").parse_intermixed_args(["m", "--root-path", "/llm/"]).root_path == "/llm"
    with pytest.raises(SystemExit):
        command_parser("serve").parse_intermixed_args(["m", "--root-path", "llm"])
    assert "give it with its leading slash, /llm" in capsys.readouterr().err
    assert main(["-v"]) == 0 and capsys.readouterr().out.startswith("hearth ")
    assert main(["run-batch", "-i", "https://example.com/x.jsonl", "-o", "o.jsonl"]) == 1
    assert "a URL; download it" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["", " ", ","])
def test_an_empty_api_key_is_refused_not_an_open_server(key, capsys, monkeypatch):
    """`--api-key "$KEY"` with KEY unset started a server open to anyone, without a word."""
    import hearth.llm

    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **k: pytest.fail("loaded a model for bad input"))
    assert main(["serve", "m", "--api-key", key]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"hearth: error: --api-key {key!r} names no key") and err.count("\n") == 1


def test_an_empty_api_key_variable_is_no_key(monkeypatch):
    """`export HEARTH_API_KEY=` reads as unset (an open server, as without it), not as a refused empty key."""
    import argparse

    from hearth.commands.serve import add_arguments, server_config

    monkeypatch.setenv("HEARTH_API_KEY", "")
    p = argparse.ArgumentParser()
    add_arguments(p)
    assert server_config(p.parse_args(["m"])).api_key is None


def test_serve_names_a_bad_model_file_once(tmp_path, capsys, no_model_load):
    """`hearth serve /tmp/x.gguf` said the path twice: "MODEL '/tmp/x.gguf': /tmp/x.gguf: not a GGUF file"."""
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"hi\n")
    for model, why in ((bad, "not a GGUF file"), (tmp_path / "none.gguf", "model file not found")):
        assert main(["serve", str(model)]) == 1
        err = capsys.readouterr().err
        assert err.count(str(model)) == 1 and why in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("command", ["run", "serve"])
@pytest.mark.parametrize("flags, said", [
    (["--spec-type", "draft-simple", "-md", "smollm2"], "-md: unknown model 'smollm2' (did you mean smollm2-135m?)"),
    (["--model-draft", "nosuch"], "--model-draft: unknown model 'nosuch': use a catalog name"),
    (["--speculative-config", '{"method": "draft", "model": "nosuch"}'],
     "--speculative-config's model: unknown model 'nosuch': use a catalog name"),
])
def test_an_unknown_draft_model_is_the_flag_s_before_a_load(tiny_models, capsys, no_model_load, command, flags, said):
    """-md nosuch was 'speculative_config.model ...', a key never typed, and `hearth run` said it after the
    target model loaded."""
    args = [command, str(tiny_models[1]), *flags] + (["hi"] if command == "run" else [])
    assert main(args) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"hearth: error: {said}"), err


def test_hearth_s_log_warnings_read_as_the_cli_s_other_lines(tiny_models, capsys):
    """A hearth log warning (LLM's --threads note) printed bare outside `hearth serve`: the CLI now sets the
    `hearth` logger up once, so it reads `hearth: warning: ...` (its message's own `hearth: ` not said twice)."""
    import os

    import torch

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    before = torch.get_num_threads()
    try:
        _, err = run_stdout(capsys, str(tiny_models[0]), PROMPT, *GREEDY, "--threads", str(cpus + 1))
    finally:
        torch.set_num_threads(before)
    said = [line for line in err if "CPUs this process may use" in line]
    assert said == [f"hearth: warning: --threads {cpus + 1} is more than the {cpus} CPUs this process may use: "
                    "steps run slower, not faster"], err


def test_the_terminal_format_labels_warnings_and_not_notes(capsys):
    """`hearth run --verbose`'s info lines read as its other lines (were uvicorn's `INFO:     hearth: ...`)."""
    import logging

    from hearth.commands.logs import configure_logging

    configure_logging("info", terminal=True)
    logging.getLogger("hearth.loader").info("draft d.gguf: matrices at q8_0")
    logging.getLogger("hearth.kvstore").warning("KV disk tier: ignoring %s", "x.kv")
    logging.getLogger("hearth.kvstore").debug("not at info")
    assert capsys.readouterr().err.splitlines() == ["hearth: draft d.gguf: matrices at q8_0",
                                                    "hearth: warning: KV disk tier: ignoring x.kv"]
