"""A pasted llama-server or `vllm serve` command line runs: a peer flag whose value asks for nothing hearth
would do otherwise is one warning line, one that asks for what hearth cannot do is one error line."""

import pytest

from hearth.cli import main

LLAMA_SERVER = ["-m", "qwen2.5-coder-0.5b", "-c", "4096", "-ngl", "99", "--port", "8181", "-np", "4", "--jinja",
                "-fa", "on"]


@pytest.fixture
def started(monkeypatch):
    """The command's main, replaced: the parsed args of each start."""
    import hearth.commands.run
    import hearth.commands.serve

    seen = []
    for module in (hearth.commands.serve, hearth.commands.run):
        monkeypatch.setattr(module, "main", lambda args: seen.append(args) or 0)
    return seen


def test_a_pasted_llama_server_line_starts_with_one_warning_per_peer_flag(started, capsys):
    assert main(["serve", *LLAMA_SERVER]) == 0
    args = started[0]
    assert args.model_flag == ["qwen2.5-coder-0.5b"] and args.max_model_len == 4096
    assert args.port == 8181 and args.max_num_seqs == 4
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("hearth: warning: ") for line in err), err
    assert err[0].startswith("hearth: warning: -ngl 99 is llama.cpp's GPU offload: hearth runs a whole model on one "
                             "device, here the CPU") and err[0].endswith("; ignored")
    assert err[1].startswith("hearth: warning: -fa on is llama.cpp's flash attention")


@pytest.mark.parametrize("argv", [
    ["-ngl", "0"], ["--n-gpu-layers=35"], ["-fa"], ["-fa", "off"], ["--flash-attn", "auto"], ["--mlock"],
    ["--no-mmap"], ["-cb"], ["--cont-batching"], ["-ub", "512"], ["-tb", "8"], ["--cache-reuse", "256"],
    ["--dtype", "auto"], ["--gpu-memory-utilization", "0.9"], ["--cpu-offload-gb", "0"],
    ["--tensor-parallel-size", "1"], ["-tp", "1"], ["--pipeline-parallel-size", "1"], ["--no-warmup"],
    ["--block-size", "16"], ["--load-format", "gguf"], ["--quantization", "gguf"], ["-q", "GGUF"],
    ["--generation-config", "vllm"],
], ids=" ".join)
def test_a_peer_flag_with_nothing_to_do_is_one_warning_and_the_server_starts(argv, started, capsys):
    assert main(["serve", "m", *argv]) == 0 and started
    err = capsys.readouterr().err.splitlines()
    flag = argv[0].split("=")[0]
    assert len(err) == 1 and err[0].startswith(f"hearth: warning: {flag}") and "ignored" in err[0], err


def test_a_peer_flag_s_value_is_not_taken_for_the_model(started, capsys):
    """-fa without a value, then the model: the model is not -fa's value."""
    assert main(["serve", "-fa", "m"]) == 0 and started[0].model == ["m"]
    assert main(["run", "m", "hi", "-ngl", "99"]) == 0 and started[1].prompt == "hi"


@pytest.mark.parametrize("argv,says", [
    (["-tp", "2"], "-tp 2: -tp is vLLM's: hearth runs an engine on one device"),
    (["--pipeline-parallel-size", "4"], "--pipeline-parallel-size 4: --pipeline-parallel-size is vLLM's"),
    (["--dtype", "float32"], "--dtype float32: --dtype is vLLM's: hearth keeps each weight in its GGUF's format"),
    (["--cpu-offload-gb", "4"], "--cpu-offload-gb 4: --cpu-offload-gb is vLLM's: hearth runs a whole model on one"),
    (["-ngl", "all"], "-ngl takes a number of layers, not 'all'"),
    (["-ctk", "q8_0", "-ctv", "f16"], "-ctk q8_0 -ctv f16: hearth keeps K and V in one format"),
    (["-ctk", "iq4_nl", "-ctv", "iq4_nl"], "hearth has no KV cache type 'iq4_nl'; --kv-cache-dtype takes f16"),
    (["-ctk", "q4_1"], "-ctk q4_1: hearth has no KV cache type 'q4_1'"),  # not "K and V in one format"
    (["-ctk", "q8_0", "-ctv", "q8_0", "--kv-cache-dtype", "q4_0"], "-ctk q8_0 -ctv q8_0 and --kv-cache-dtype q4_0 "
     "differ: give one of them"),  # q8_0 won, silently
    (["--kv-cache-dtype=q4_0", "-ctk", "q8_0", "-ctv", "q8_0"], "and --kv-cache-dtype q4_0 differ"),
    (["--samplers", "top_k;temperature"], "--samplers is llama.cpp's sampler order: hearth's is llama.cpp's default"),
    (["-ub"], "-ub takes a value"),
    (["--block-size", "32"], "--block-size 32: --block-size is vLLM's KV block size: hearth's KV blocks are 16"),
    (["--load-format", "safetensors"], "--load-format safetensors: --load-format is vLLM's: hearth reads GGUF"),
    (["--quantization", "awq"], "--quantization awq: --quantization is vLLM's: a GGUF's quantization is its own"),
    (["--generation-config", "auto"], "--generation-config auto: --generation-config is vLLM's source of default"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_peer_flag_asking_what_hearth_cannot_do_is_one_error_naming_it(argv, says, started, capsys):
    assert main(["serve", "m", *argv]) == 2 and not started
    err = capsys.readouterr().err
    assert err.startswith("hearth: error: ") and says in err and err.count("\n") == 1, err


def test_llama_cli_s_single_turn_is_what_run_does_with_a_prompt(started, capsys):
    assert main(["serve", "m", "-st"]) == 0 and started
    assert capsys.readouterr().err == ("hearth: warning: -st is llama-cli's single turn: hearth run answers a PROMPT "
                                       "given on the command line (or piped) and exits; ignored\n")


def test_llama_cpp_s_kv_cache_types_are_hearth_s_kv_cache_dtype(started, capsys):
    assert main(["serve", "m", "-ctk", "q8_0", "-ctv", "q8_0"]) == 0
    assert started[0].kv_cache_dtype == "q8_0"
    capsys.readouterr()
    assert main(["serve", "m", "-ctk", "q8_0", "-ctv", "q8_0", "--kv-cache-dtype", "Q8_0"]) == 0  # the same: fine
    assert started[1].kv_cache_dtype == "q8_0"
    assert capsys.readouterr().err == ("hearth: warning: -ctk q8_0 -ctv q8_0 is llama.cpp's KV cache type: "
                                       "--kv-cache-dtype q8_0\n")


@pytest.mark.parametrize("argv,field,value", [
    (["--slot-save-path", "slots"], "kv_disk_dir", "slots"),
    (["-v"], "log_level", "debug"), (["--verbose"], "log_level", "debug"), (["--log-disable"], "log_level", "error"),
])
def test_a_peer_flag_hearth_has_under_its_own_name_is_that_flag(argv, field, value, started, capsys):
    assert main(["serve", "m", *argv]) == 0
    assert getattr(started[0], field) == value
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"hearth: warning: {argv[0]}"), err


def test_run_s_verbose_is_its_own_and_v_is_it(started, capsys):
    assert main(["run", "m", "hi", "-v"]) == 0 and started[0].verbose
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv", [["serve", "m", "--version"], ["run", "--version"]])
def test_a_command_s_version_flag_is_hearth_s_version(argv, started, capsys):
    from hearth.cli import version

    assert main(argv) == 0 and not started
    assert capsys.readouterr().out == version() + "\n"


@pytest.mark.parametrize("argv", [
    ["serve", "m", "--reasoning-format", "deepseek"], ["serve", "m", "--reasoning-budget", "0"],
    ["serve", "m", "--log-file", "x"],
    ["serve", "m", "--numa", "distribute"], ["serve", "m", "-dev", "CUDA0"], ["serve", "m", "--n-cpu-moe", "8"],
    ["serve", "m", "-ot", "exps=CPU"], ["serve", "m", "--cache-ram", "8192"], ["serve", "m", "--swa-full"],
    ["serve", "m", "-kvo"], ["serve", "m", "--grammar", "root ::= x"],
    ["serve", "m", "--guided-decoding-backend", "xgrammar"], ["serve", "m", "--chat-template-content-format", "openai"],
    ["serve", "m", "--response-role", "assistant"], ["serve", "m", "--distributed-executor-backend", "mp"],
    ["run", "m", "--keepalive", "5m"],
], ids=" ".join)
def test_a_peer_flag_without_a_hint_before_has_one(argv, started, capsys):
    """These were argparse's bare "unrecognized arguments"."""
    assert main(argv) == 2 and not started
    err = capsys.readouterr().err
    flag = argv[2]
    assert err.startswith(f"hearth: error: {flag} is ") and err.count("\n") == 1, err


def test_run_s_interactive_and_wordwrap_flags_are_warnings(started, capsys):
    assert main(["run", "m", "-i", "--nowordwrap"]) == 0 and started[0].prompt is None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("hearth: warning: -i is llama-cli's interactive mode"), err


def test_ollama_s_stop_command_names_hearth_s_way(capsys):
    assert main(["stop", "m"]) == 2
    assert "unknown command 'stop' (ollama's: " in capsys.readouterr().err



def test_a_peer_flag_is_read_one_way():
    """A warning (peer_values) or an error (foreign_flags), never both tables."""
    from hearth.commands.foreign_flags import FOREIGN
    from hearth.commands.peer_values import PEER_VALUES

    assert not set(PEER_VALUES) & set(FOREIGN)


LLAMA_SAMPLING = ["--temp", "0.7", "--top-p", "0.8", "--top-k", "20", "--min-p", "0.05", "--repeat-penalty", "1.05",
                  "--presence-penalty", "1.5", "--frequency-penalty", "0.5"]
SET = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05,
       "presence_penalty": 1.5, "frequency_penalty": 0.5}


@pytest.mark.parametrize("command", ["serve", "run-batch"])
def test_llama_server_s_sampling_flags_are_the_server_s_defaults(command, started, capsys, monkeypatch):
    from hearth.commands.serve import server_config

    if command == "run-batch":
        import hearth.commands.run_batch
        monkeypatch.setattr(hearth.commands.run_batch, "main", lambda args: started.append(args) or 0)
        argv = ["run-batch", "-i", "in.jsonl", "-o", "out.jsonl", "m", *LLAMA_SAMPLING]
    else:
        argv = ["serve", "m", *LLAMA_SAMPLING]
    assert main(argv) == 0 and capsys.readouterr().err == ""
    assert server_config(started[0]).sampling_defaults == SET


def test_vllm_s_override_generation_config_sets_the_same_defaults(started):
    from hearth.commands.serve import server_config

    assert main(["serve", "m", "--override-generation-config", '{"temperature": 0.7, "top_p": 0.8, "top_k": 20, '
                 '"min_p": 0.05, "repetition_penalty": 1.05, "presence_penalty": 1.5, "frequency_penalty": 0.5}']) == 0
    assert server_config(started[0]).sampling_defaults == SET
    assert main(["serve", "m", "--override-generation-config", '{"temperature": 0.2}', "--temp", "0.5"]) == 0
    assert server_config(started[1]).sampling_defaults == {"temperature": 0.5}  # the flag wins over its key


@pytest.mark.parametrize("argv,says", [
    (["--temp", "-1"], "--temp must be >= 0, got -1.0"),
    (["--temp", "nan"], "--temp must be a finite number, got nan"),
    (["--top-p", "1.5"], "--top-p must be in [0, 1], got 1.5"),
    (["--top-k", "-2"], "--top-k must be -1, 0 or positive, got -2"),
    (["--min-p", "2"], "--min-p must be in [0, 1], got 2.0"),
    (["--repeat-penalty", "0"], "--repeat-penalty must be > 0, got 0.0"),
    (["--presence-penalty", "3"], "--presence-penalty must be in [-2, 2], got 3.0"),
    (["--frequency-penalty", "-3"], "--frequency-penalty must be in [-2, 2], got -3.0"),
    (["--override-generation-config", '{"temprature": 0.7}'],
     "--override-generation-config: hearth has no generation-config key 'temprature'; it takes temperature, "),
    (["--override-generation-config", '{"top_p": 2}'], "--override-generation-config top_p must be in [0, 1], got 2"),
    (["--override-generation-config", '{"top_k": 2.5}'], "--override-generation-config top_k must be an integer"),
    (["--override-generation-config", "temperature=0.7"], "--override-generation-config: not JSON"),
])
def test_a_bad_default_is_one_line_naming_its_flag(argv, says, capsys):
    from hearth.commands.serve import server_config

    from hearth.cli import command_parser
    from hearth.errors import HearthError

    args = command_parser("serve").parse_intermixed_args(["m", *argv])
    with pytest.raises(HearthError) as e:
        server_config(args)
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)
