"""How hearth.llm.LLM takes calls: from several threads at once (one at a time, each returning what
it would alone, request ids unique across calls), with prompts of the wrong type (a TypeError naming
what a prompt may be: vLLM's PromptType), and after close() (LLMClosedError, not a silent success)."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest

from hearth import SamplingParams
from hearth.config import EngineConfig
from hearth.llm import LLM, LLMClosedError
from tests.gguf_factory import write_tiny_gguf
from tests.test_llm import TEMPLATE

GREEDY = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama", chat_template=TEMPLATE)
    return str(path)


@pytest.fixture(scope="module")
def llm(tiny):
    return LLM(tiny, max_model_len=256, max_num_seqs=4, progress=False)


def slow_steps(llm, monkeypatch, seconds: float = 0.01) -> None:
    """Each engine step sleeps first (the GIL released), so every thread started together comes in
    during another's call: the race, on every run."""
    step = llm.engine.step

    def slow():
        time.sleep(seconds)
        return step()

    monkeypatch.setattr(llm.engine, "step", slow)


def run_threads(target, args: list) -> None:
    threads = [threading.Thread(target=target, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)


def test_threads_calling_generate_at_once_each_get_what_a_lone_call_gets(llm, monkeypatch):
    """The trial's repro: two threads raised KeyError: '0-0' (ids restarted at 0 each call) and the
    third got wrong text (threads stepped the engine at once and took each other's outputs)."""
    prompts = [f"Number {i}:" for i in range(4)]
    alone = {p: llm.generate(p, GREEDY)[0].outputs[0] for p in prompts}
    assert len({tuple(c.token_ids) for c in alone.values()}) > 1  # else a mix-up could not show
    slow_steps(llm, monkeypatch)
    start, got, errors = threading.Barrier(len(prompts)), {}, []

    def call(prompt: str) -> None:
        start.wait()
        try:
            got[prompt] = llm.generate(prompt, GREEDY)[0]
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    run_threads(call, prompts)
    assert errors == []
    assert {p: (r.outputs[0].token_ids, r.outputs[0].text) for p, r in got.items()} == \
        {p: (c.token_ids, c.text) for p, c in alone.items()}
    assert len({r.request_id for r in got.values()}) == len(prompts)
    assert not llm.engine.has_unfinished()


def test_request_ids_are_unique_across_calls(llm):
    first = llm.generate(["a", "b"], SamplingParams(max_tokens=1))
    second = llm.generate("a", SamplingParams(max_tokens=1))
    ids = [r.request_id for r in first + second]
    assert len(set(ids)) == 3


def test_an_open_stream_holds_the_engine_until_it_ends(llm):
    """Another thread's call waits for the stream (it would take the stream's outputs); the stream's
    own thread gets an error, not a wait for itself."""
    alone = llm.generate("b", GREEDY)[0].outputs[0].token_ids
    stream = llm.stream("a", GREEDY)
    deltas = [next(stream)]
    with pytest.raises(RuntimeError, match=re.escape("LLM.generate: a stream of this LLM is still open in this "
                                                     "thread: exhaust or close() it first")):
        llm.generate("b", GREEDY)
    got = []
    other = threading.Thread(target=lambda: got.append(llm.generate("b", GREEDY)[0]))
    other.start()
    other.join(timeout=0.3)
    assert other.is_alive() and not got  # waiting for the stream
    deltas += list(stream)
    other.join(timeout=60)
    assert sum(len(d.new_token_ids) for d in deltas) == GREEDY.max_tokens and deltas[-1].finished
    assert got[0].outputs[0].token_ids == alone
    assert not llm.engine.has_unfinished()


TYPES = "a str, {'prompt': str} or {'prompt_token_ids': [int, ...]}"


@pytest.mark.parametrize("prompts, expected", [
    (123, f"prompts must be one prompt ({TYPES}) or a list of them, not int"),
    (None, f"prompts must be one prompt ({TYPES}) or a list of them, not NoneType"),
    (b"hi", f"prompts must be one prompt ({TYPES}) or a list of them, not bytes"),
    (["ok", 5], f"prompts[1] must be {TYPES}, not int"),
    ([{"text": "hi"}], f"prompts[0] must be {TYPES}, not a dict without 'prompt' or 'prompt_token_ids' (keys: text)"),
    ({"prompt": ["hi"]}, f"prompts[0] must be {TYPES}, not {{'prompt': list}}"),
    ({"prompt_token_ids": "12"}, "prompts[0]['prompt_token_ids'] must be a list of int token ids, not str"),
    ({"prompt_token_ids": 7}, "prompts[0]['prompt_token_ids'] must be a list of int token ids, not int"),
    ({"prompt_token_ids": [1, 2.0]}, "prompts[0]['prompt_token_ids'][1] must be an int token id, not float"),
])
def test_a_prompt_of_the_wrong_type_names_what_a_prompt_may_be(llm, prompts, expected):
    """llm.generate(123) was TypeError: 'int' object is not iterable."""
    with pytest.raises(TypeError, match=f"^{re.escape(expected)}$"):
        llm.generate(prompts, SamplingParams(max_tokens=1))
    assert not llm.engine.has_unfinished()


@pytest.mark.parametrize("call, expected", [
    (lambda llm: llm.generate(["a", "b"], [GREEDY]), "1 sampling params for 2 prompts"),
    (lambda llm: llm.generate("a", GREEDY, lora_request=[None, None]), "2 LoRA requests for 1 prompts"),
    (lambda llm: llm.chat([[{"role": "user", "content": "hi"}]] * 2, [GREEDY] * 3),
     "3 sampling params for 2 conversations"),
])
def test_a_keyword_listed_per_prompt_must_have_one_per_prompt(llm, call, expected):
    """sampling_params and lora_request: one for all, or a list as long as the prompts (conversations)."""
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        call(llm)
    assert not llm.engine.has_unfinished()

def test_every_prompt_form_runs_the_same_tokens(llm):
    """vLLM's forms: a string, a TextPrompt, a TokensPrompt (numpy ints too), one or a list (or tuple)."""
    ids = llm.tokenizer.encode("Number 7:")
    forms = ["Number 7:", ["Number 7:"], ("Number 7:",), {"prompt": "Number 7:"}, [{"prompt_token_ids": ids}],
             {"prompt_token_ids": np.array(ids)}]
    outs = [llm.generate(f, GREEDY) for f in forms]
    assert all(len(o) == 1 and o[0].prompt_token_ids == ids for o in outs)
    assert len({tuple(o[0].outputs[0].token_ids) for o in outs}) == 1
    assert outs[3][0].prompt == "Number 7:"
    assert llm.generate([], GREEDY) == []


def test_after_close_calls_that_run_the_engine_raise(tiny, monkeypatch):
    """close() used to leave generate working (without the disk tier it had just closed). It waits
    for a call in progress, may come twice, and leaves what runs no engine (encode_chat) working."""
    llm = LLM(tiny, max_model_len=256, max_num_seqs=1, progress=False)
    slow_steps(llm, monkeypatch)
    running = []
    other = threading.Thread(target=lambda: running.append(llm.generate("hi", GREEDY)[0]))
    other.start()
    deadline = time.monotonic() + 30
    while not llm.engine.has_unfinished() and time.monotonic() < deadline:  # until it runs
        time.sleep(0.001)
    llm.close()
    assert not other.is_alive() and len(running[0].outputs[0].token_ids) == GREEDY.max_tokens
    llm.close()
    messages = [{"role": "user", "content": "hi"}]
    for name, call in [("generate", lambda: llm.generate("hi", GREEDY)),
                       ("generate", lambda: llm.chat(messages, GREEDY)),
                       ("stream", lambda: next(llm.stream("hi", GREEDY)))]:
        with pytest.raises(LLMClosedError, match=re.escape(f"LLM.{name}: this LLM is closed (LLM.close() was "
                                                           "called): load a new LLM")):
            call()
    assert llm.encode_chat(messages)


def test_the_class_docstring_names_the_main_engine_arguments():
    """help(LLM) showed only **engine_args."""
    doc = LLM.__doc__ or ""
    fields = set(EngineConfig.__dataclass_fields__)
    for name in ("model", "max_model_len", "max_num_seqs", "threads", "kv_cache_dtype", "speculative_config",
                 "enable_prefix_caching", "max_logprobs"):
        assert name in fields and re.search(rf"\b{name}\b", doc), name
    named = set(re.findall(r"^\s+(\w+):", doc, re.M))  # each line's first name is an EngineConfig field
    assert named and named <= fields | {"progress"}, named - fields
    assert "tool_guard" in doc
