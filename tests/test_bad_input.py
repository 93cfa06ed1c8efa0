"""Bad input to the CLI is one clear line on stderr and exit status 1, never a traceback."""

from __future__ import annotations

import os

import gguf
import pytest

from hearth.cli import main
from tests.gguf_factory import write_header_only_gguf, write_tiny_gguf


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith("hearth: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, err


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama")
    return path


def test_missing_file(capsys, tmp_path):
    code, err = run_cli(capsys, "run", str(tmp_path / "nope.gguf"), "hi")
    assert_one_line_error(code, err, "not found", "nope.gguf")


def test_bad_magic(capsys, tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGML" + os.urandom(64))
    code, err = run_cli(capsys, "run", str(path), "hi")
    assert_one_line_error(code, err, "bad magic")


def test_truncated_tensor_data(capsys, tiny):
    size = tiny.stat().st_size
    with open(tiny, "r+b") as fh:
        fh.truncate(size - 1000)
    code, err = run_cli(capsys, "run", str(tiny), "hi")
    assert_one_line_error(code, err, "truncated")


def test_truncated_header(capsys, tiny):
    with open(tiny, "r+b") as fh:
        fh.truncate(40)
    code, err = run_cli(capsys, "run", str(tiny), "hi")
    assert_one_line_error(code, err, "tiny.gguf")


def test_unknown_tensor_type(capsys, tiny):
    reader = gguf.GGUFReader(tiny, "r+")
    reader.tensors[-1].field.parts[4][0] = 99  # the tensor's ggml type id
    reader.data.flush()
    del reader
    code, err = run_cli(capsys, "run", str(tiny), "hi")
    assert_one_line_error(code, err, "99")


def test_unsupported_architecture(capsys, tmp_path):
    path = tmp_path / "mamba.gguf"
    write_header_only_gguf(path, "mamba")
    code, err = run_cli(capsys, "run", str(path), "hi")
    assert_one_line_error(code, err, "mamba", "llama")


def test_prompt_longer_than_context(capsys, tiny):
    code, err = run_cli(capsys, "run", str(tiny), "--ctx", "8", "word " * 50)
    assert_one_line_error(code, err, "context holds 8", "--ctx")  # run's flag, not serve's --max-model-len


def test_prompt_longer_than_the_model_s_whole_context_names_only_shortening(capsys, tiny):
    """The tiny model's context is 256: --ctx 0 (the model's) cannot be raised, so it is not offered."""
    code, err = run_cli(capsys, "run", str(tiny), "--ctx", "0", "word " * 300)
    assert_one_line_error(code, err, "context holds 256", "shorten it")
    assert "--ctx" not in err and "raise" not in err


@pytest.mark.parametrize("ctx,raise_it", [("0", False), ("64", True)])
def test_max_tokens_past_the_room_offers_a_larger_ctx_only_below_the_model_s(capsys, tiny, ctx, raise_it):
    """The same rule as a prompt too long (hearth.errors.can_raise_context): at the model's own 256
    tokens (--ctx 0), only lowering --max-tokens helps. Said at startup, before any prompt."""
    code, err = run_cli(capsys, "run", str(tiny), "--ctx", ctx, "--max-tokens", "300", "hi")
    assert_one_line_error(code, err, "--max-tokens 300 leaves no room for a prompt", "lower --max-tokens")
    assert ("raise --ctx" in err) == raise_it


@pytest.mark.parametrize("max_model_len,remedy", [
    (256, "shorten the prompt"),
    (8, "shorten the prompt or raise --max-model-len (the model's own context is 256)"),
])
def test_the_engine_s_too_long_error_says_what_the_user_can_do(tiny, max_model_len, remedy):
    """The message the server's 400 carries (from_hearth_error keeps it as it is)."""
    from hearth import LLM
    from hearth.errors import PromptTooLongError

    llm = LLM(str(tiny), progress=False, max_model_len=max_model_len, max_num_seqs=1)
    with pytest.raises(PromptTooLongError) as e:
        llm.engine.check_prompt(list(range(1, 300)))
    assert str(e.value).endswith(f"; {remedy}")


def test_interactive_chat_outlives_a_message_too_long(capsys, monkeypatch, tiny):
    """The chat said the error and ended; now it says it, forgets that message and goes on (and, its
    input piped, exits 1 at the end: a line went unanswered)."""
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("hi\n" + "z" * 400 + "\n/help\nhi\n/bye\nnever sent\n"))
    # --chat: tiny has no template of its own, and without one each line is completed on its own
    code = main(["run", str(tiny), "--ctx", "160", "--max-tokens", "2", "--temperature", "0", "--chat"])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("hearth: error: ")]
    assert len(errors) == 1 and "context holds 160" in errors[0] and "--ctx" in errors[0] and "/clear" in errors[0]
    assert "/bye" in err  # /help's line
    assert len(out.splitlines()) == 2  # the two answers to "hi"


def test_a_negative_context_is_one_line(capsys, tiny):
    code, err = run_cli(capsys, "run", str(tiny), "--ctx", "-5", "hi")
    assert_one_line_error(code, err, "-5")


def test_a_context_past_the_model_s_is_said(caplog, tmp_path):
    from hearth import LLM

    path = tmp_path / "tiny.gguf"
    dims = write_tiny_gguf(path, "llama")
    llm = LLM(str(path), max_model_len=dims.context * 4, progress=False)
    assert llm.max_model_len == dims.context
    assert any(f"{dims.context:,} tokens" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_unknown_model_name(capsys):
    code, err = run_cli(capsys, "run", "no-such-model", "hi")
    assert_one_line_error(code, err, "no-such-model")


def test_directory_instead_of_file(capsys, tmp_path):
    code, err = run_cli(capsys, "run", str(tmp_path), "hi")
    assert_one_line_error(code, err, str(tmp_path))


def test_unsupported_gguf_version(capsys, tiny):
    with open(tiny, "r+b") as fh:
        fh.seek(4)
        fh.write((7).to_bytes(4, "little"))
    code, err = run_cli(capsys, "run", str(tiny), "hi")
    assert_one_line_error(code, err, "version 7")


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory):
    from hearth import LLM

    path = tmp_path_factory.mktemp("m") / "tiny.gguf"
    write_tiny_gguf(path, "llama")
    return LLM(str(path), max_model_len=64, progress=False)


@pytest.mark.parametrize("prompt,needle", [
    ({"prompt_token_ids": []}, "prompt is empty"),
    ({"prompt_token_ids": [1, 10**6]}, "token id 1000000 is outside the vocabulary"),
    ({"prompt_token_ids": [1] * 65}, "context holds 64"),
    ({"prompt_token_ids": [1] * 64}, r"fills the context \(64\) and leaves no room for an answer"),
])
def test_engine_rejects_bad_prompts_and_queues_nothing(tiny_llm, prompt, needle):
    from hearth.errors import HearthError

    with pytest.raises(HearthError, match=needle):
        tiny_llm.generate([{"prompt_token_ids": [1, 2]}, prompt])
    assert not tiny_llm.engine.has_unfinished()  # the good prompt before it was not queued either


def test_a_failed_step_leaves_no_request_behind_in_the_library(tiny_llm, monkeypatch):
    """LLM.generate raises what the step raised and aborts its requests: the next call (same request
    ids) starts from a clean engine and answers as if nothing happened."""
    from hearth import SamplingParams

    params, prompts = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True), [{"prompt_token_ids": [1, 2]}] * 2
    clean = [o.outputs[0].token_ids for o in tiny_llm.generate(prompts, params)]
    runner = tiny_llm.engine.runner
    real, calls = runner.execute, {"n": 0}

    def flaky(so):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("kernel error")
        return real(so)

    monkeypatch.setattr(runner, "execute", flaky)
    with pytest.raises(RuntimeError, match="kernel error"):
        tiny_llm.generate(prompts, params)
    assert not tiny_llm.engine.has_unfinished() and tiny_llm.engine.scheduler.kv.num_used_blocks == 0
    assert [o.outputs[0].token_ids for o in tiny_llm.generate(prompts, params)] == clean


def test_max_tokens_past_the_context_ends_the_answer_there_in_the_library(tiny_llm):
    """LLM.generate, as vLLM's LLM: SamplingParams cannot tell a max_tokens its caller set from its
    default (16), so the room left caps it (finish_reason "length"); the API and the CLI, which can
    tell, answer 400 / one line (tests/server/test_errors.py, the test below)."""
    from hearth import SamplingParams

    prompt = {"prompt_token_ids": [1] * 60}  # 4 tokens of room in the 64
    for params in (SamplingParams(max_tokens=5, temperature=0, ignore_eos=True),
                   SamplingParams(temperature=0, ignore_eos=True),  # the default 16
                   SamplingParams(max_tokens=None, temperature=0, ignore_eos=True)):
        out = tiny_llm.generate(prompt, params)[0].outputs[0]
        assert len(out.token_ids) == 4 and out.finish_reason == "length"


def test_run_max_tokens_past_the_context_is_one_line(capsys, tiny):
    code, err = run_cli(capsys, "run", str(tiny), "--ctx", "80", "--max-tokens", "80", "hi")
    assert_one_line_error(code, err, "--max-tokens 80 leaves no room for a prompt in the context of 80 tokens", "--ctx")
    code = main(["run", str(tiny), "--ctx", "80", "--temperature", "0", "hi"])  # the default: within the room
    assert code == 0 and "error" not in capsys.readouterr().err


@pytest.mark.parametrize("field,value", [
    ("n", 0), ("temperature", -1), ("top_p", 1.5), ("top_p", -0.1), ("top_k", -2), ("min_p", 2), ("max_tokens", 0),
    ("repetition_penalty", 0), ("presence_penalty", 3), ("frequency_penalty", -3), ("min_tokens", -1),
    ("logprobs", -2), ("temperature", float("inf")), ("seed", 2**64), ("seed", -(2**63) - 1), ("stop", [""]),
    ("min_tokens", 17),  # above the default max_tokens of 16
])
def test_sampling_params_out_of_range_name_the_field(field, value):
    from hearth.sampling_params import InvalidSamplingParams, SamplingParams

    with pytest.raises(InvalidSamplingParams, match=field):
        SamplingParams(**{field: value})


def test_an_integer_in_a_float_field_is_a_float_and_one_past_a_double_is_named():
    """Ollama's options (read without pydantic) gave temperature 10**20 as an int: torch.tensor([1.0, 10**20])
    overflowed int64 in the engine step, a 500 for every request in it."""
    from hearth.sampling_params import InvalidSamplingParams, SamplingParams

    p = SamplingParams(temperature=10**20, top_p=1, mirostat_tau=3)
    assert (p.temperature, p.top_p, p.mirostat_tau) == (1e20, 1.0, 3.0)
    assert all(type(v) is float for v in (p.temperature, p.top_p, p.mirostat_tau))
    for value, got in ((10**400, "inf"), (-(10**400), "-inf")):
        with pytest.raises(InvalidSamplingParams, match=f"^temperature must be a finite number, got {got}$"):
            SamplingParams(temperature=value)


def test_seed_limits_are_the_generator_s():
    """The extremes of the accepted range seed a torch generator (a seed outside it failed the step)."""
    import torch

    from hearth.sampling_params import InvalidSamplingParams, SamplingParams

    for seed in (-(2**63), 2**64 - 1):
        torch.Generator().manual_seed(SamplingParams(seed=seed).seed)
    p = SamplingParams(seed=2**64 - 3, n=3)  # choice j draws with seed + j
    for j in range(p.n):
        torch.Generator().manual_seed(p.seed + j)
    with pytest.raises(InvalidSamplingParams, match="seed"):
        SamplingParams(seed=2**64 - 2, n=3)


@pytest.mark.parametrize("argv,needle", [
    (["--port", "99999"], "--port must be in [0, 65535]"),  # was uvicorn's traceback
    (["--max-n", "0"], "--max-n"),
    (["--max-body-mb", "0"], "--max-body-mb"),
    (["--threads", "-2"], "--threads"),  # the engine thread died setting it: the server hung (-1: llama.cpp's 0)
    (["--max-num-seqs", "0"], "--max-num-seqs"),  # nothing was ever scheduled
    (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens"),
    (["--ctx", "-1"], "--ctx"),
    (["--kv-cache-memory-gb", "0"], "--kv-cache-memory-gb"),
])
def test_serve_flags_out_of_range_are_one_line(capsys, tiny, argv, needle):
    code, err = run_cli(capsys, "serve", str(tiny), *argv)
    err = "\n".join(line for line in err.splitlines() if not line.startswith("hearth: loading"))
    assert_one_line_error(code, err, needle)


def test_serve_an_unknown_model_names_it_once(capsys):
    """Was "MODEL 'nope': model: unknown model 'nope': ...": the model named twice."""
    code, err = run_cli(capsys, "serve", "nope")
    assert_one_line_error(code, err, "MODEL: unknown model 'nope': use a catalog name")
    assert err.count("nope") == 1, err


def test_serve_an_unknown_kv_cache_dtype_names_the_flag(capsys, tiny):
    """Was "MODEL 'tiny.gguf': unknown KV cache dtype": the model blamed for the flag's value."""
    code, err = run_cli(capsys, "serve", str(tiny), "--kv-cache-dtype", "bogus")
    assert_one_line_error(code, err, "--kv-cache-dtype: KV cache dtype 'bogus' is not supported; supported: auto")
    assert "MODEL" not in err and "tiny" not in err, err
