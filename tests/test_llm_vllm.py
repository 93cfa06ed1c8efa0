"""hearth.LLM called as vLLM's documentation and examples call vllm.LLM (offline inference): its constructor's
arguments, generate's and chat's keywords, SamplingParams' fields and the outputs' shapes."""

from __future__ import annotations

import logging

import pytest

from hearth import SamplingParams
from hearth.llm import LLM
from tests.test_llm_calls import llm, tiny  # noqa: F401 (a tiny llama with a chat template, and its LLM)

GREEDY = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
HI = [{"role": "user", "content": "hi"}]


def test_vllm_constructor_arguments_are_taken_each_noted_in_one_line(tiny, caplog):
    """LLM(model, dtype=..., gpu_memory_utilization=..., trust_remote_code=True) was a TypeError ("unknown
    engine argument") before anything loaded: every vLLM quickstart passes some of them."""
    with caplog.at_level(logging.WARNING, logger="hearth"):
        llm = LLM(tiny, max_model_len=128, progress=False, dtype="bfloat16", gpu_memory_utilization=0.5,
                  trust_remote_code=True, tensor_parallel_size=1, enforce_eager=False, tokenizer=tiny)
    notes = [r.getMessage() for r in caplog.records if "vLLM's" in r.getMessage()]
    assert len(notes) == 3  # the three that differ from what hearth does; vLLM's defaults say nothing
    assert any("gpu_memory_utilization=0.5" in n and "kv_cache_memory_gb" in n for n in notes)
    assert llm.generate("hi", GREEDY)[0].outputs[0].token_ids


def test_kv_cache_memory_bytes_sets_the_kv_cache_budget(tiny):
    llm = LLM(tiny, max_model_len=128, progress=False, kv_cache_memory_bytes=2**30)
    assert llm.config.kv_cache_memory_gb == 1.0


def test_an_unknown_argument_is_still_a_type_error(tiny):
    with pytest.raises(TypeError, match="gpu_memory_utilisation"):
        LLM(tiny, progress=False, gpu_memory_utilisation=0.9)


def test_get_tokenizer_is_used_as_vllms_hugging_face_tokenizer(llm):
    """llm.get_tokenizer() was an AttributeError; vLLM scripts then call apply_chat_template on it."""
    tok = llm.get_tokenizer()
    ids = tok.encode("hello")
    assert ids and isinstance(tok.decode(ids), str) and len(tok) == llm.tokenizer.vocab_size
    assert tok.eos_token_id == llm.tokenizer.eos_id
    text = tok.apply_chat_template(HI, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.apply_chat_template(HI, add_generation_prompt=True) == llm.encode_chat(HI)
    assert not tok.apply_chat_template(HI, tokenize=False).endswith("assistant\n")  # Hugging Face's default: no prompt
    assert llm.generate(text, GREEDY)[0].outputs[0].token_ids == llm.chat(HI, GREEDY)[0].outputs[0].token_ids


def test_chat_returns_one_request_output_per_conversation(llm):
    """vLLM's llm.chat returns list[RequestOutput] (`outputs[0].outputs[0].text` in every example): hearth
    returned the RequestOutput itself, so that line was a TypeError; a list of conversations was a ValueError."""
    one = llm.chat(HI, GREEDY)
    assert isinstance(one, list) and len(one) == 1
    assert one[0].prompt.endswith("<|im_start|>assistant\n")  # the rendered chat, as vLLM's
    two = llm.chat([HI, [{"role": "user", "content": "yo"}]], GREEDY)
    assert len(two) == 2 and two[0].outputs[0].token_ids == one[0].outputs[0].token_ids
    assert two[0].prompt_token_ids != two[1].prompt_token_ids
    assert two[0].outputs[0].message["role"] == "assistant"


def test_chat_takes_vllms_rendering_keywords(llm):
    asked = HI + [{"role": "assistant", "content": "Sure thing"}]
    out = llm.chat(asked, GREEDY, add_generation_prompt=False, continue_final_message=True, use_tqdm=False)[0]
    assert out.prompt.endswith("Sure thing")  # continued, not closed nor followed by a new turn
    plain = llm.chat(HI, GREEDY, chat_template="{{ messages[0]['content'] }}|")[0]
    assert plain.prompt == "hi|"
    kw = llm.chat(HI, GREEDY, chat_template="{{ greeting }} {{ messages[0]['content'] }}",
                  chat_template_kwargs={"greeting": "hello"})[0]
    assert kw.prompt == "hello hi"
    with pytest.raises(ValueError, match="continue_final_message"):
        llm.chat(asked, GREEDY, continue_final_message=True)  # vLLM refuses both at once, as here


def test_generate_takes_use_tqdm_and_a_tqdm_class(llm):
    """use_tqdm=False was a TypeError; a tqdm-like class (vLLM's use_tqdm: Callable) makes the bar."""
    seen = []

    class Bar:
        def __init__(self, total, **_):
            seen.append(total)

        def update(self, k):
            seen.append(k)

        def close(self):
            seen.append("closed")

    assert llm.generate(["a", "b"], GREEDY, use_tqdm=False)[1].outputs[0].token_ids
    llm.generate(["a", "b"], GREEDY, use_tqdm=Bar)
    assert seen == [2, 1, 1, "closed"]


def test_a_lora_request_the_llm_did_not_load_says_how_to_load_it(llm):
    from hearth.llm_lora import LoRARequest

    with pytest.raises(ValueError, match=r"lora=\[\(path, 1.0\)\]"):
        llm.generate("hi", GREEDY, lora_request=LoRARequest("sql", 1, "/no/such/adapter"))


def test_structured_outputs_params_constrain_as_vllms_do(llm):
    """SamplingParams(structured_outputs=StructuredOutputsParams(choice=[...])) (vLLM >= 0.12) and
    guided_decoding=GuidedDecodingParams(...) (before) were TypeErrors: vLLM's structured-output examples."""
    from hearth.sampling_params import GuidedDecodingParams, StructuredOutputsParams

    sp = SamplingParams(temperature=0, max_tokens=12, structured_outputs=StructuredOutputsParams(choice=["yes", "no"]))
    assert llm.generate("Answer:", sp)[0].outputs[0].text in ("yes", "no")
    sp = SamplingParams(temperature=0, max_tokens=8, guided_decoding=GuidedDecodingParams(regex=r"[0-9]{3}"))
    assert llm.generate("Number:", sp)[0].outputs[0].text.isdigit()
    schema = '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}'
    assert SamplingParams(structured_outputs=StructuredOutputsParams(json=schema)).structured_output.json_schema[
        "required"] == ["a"]
    with pytest.raises(ValueError, match="exactly one of"):
        SamplingParams(structured_outputs=StructuredOutputsParams(regex="a", choice=["b"]))


def test_allowed_token_ids_are_the_only_tokens_sampled(llm):
    allowed = [7, 11, 13]
    for temperature in (0.0, 1.0):
        sp = SamplingParams(max_tokens=8, temperature=temperature, seed=1, ignore_eos=True, allowed_token_ids=allowed)
        assert set(llm.generate("hi", sp)[0].outputs[0].token_ids) <= set(allowed)
    with pytest.raises(ValueError, match="allowed_token_ids"):
        llm.generate("hi", SamplingParams(allowed_token_ids=[10**6]))


def test_truncate_prompt_tokens_keeps_the_prompts_last_tokens(llm):
    ids = list(range(5, 25))
    out = llm.generate({"prompt_token_ids": ids}, SamplingParams(max_tokens=2, truncate_prompt_tokens=4))[0]
    assert out.prompt_token_ids == ids[-4:]


def test_detokenize_false_returns_token_ids_only(llm):
    out = llm.generate("hi", SamplingParams(max_tokens=4, temperature=0, ignore_eos=True, detokenize=False))[0]
    assert out.outputs[0].text == "" and len(out.outputs[0].token_ids) == 4
    with pytest.raises(ValueError, match="detokenize"):
        SamplingParams(detokenize=False, stop=["x"])


@pytest.mark.parametrize("kw", [{"best_of": 1}, {"spaces_between_special_tokens": False}, {"extra_args": {"k": 1}}])
def test_vllms_other_fields_are_taken(kw):
    SamplingParams(**kw)


def test_best_of_above_n_is_refused_by_name():
    with pytest.raises(ValueError, match="best_of"):
        SamplingParams(n=1, best_of=3)


def test_logprobs_are_vllms_logprob_records_with_ranks_and_a_cumulative_sum(llm):
    """vLLM's `lp[token_id].logprob` / `.rank` / `.decoded_token` were AttributeErrors (hearth held floats),
    and CompletionOutput had no cumulative_logprob."""
    import pickle

    from hearth.outputs import Logprob

    k = 3
    sp = SamplingParams(max_tokens=6, temperature=1.0, seed=7, ignore_eos=True, logprobs=k, prompt_logprobs=1)
    out = llm.generate({"prompt_token_ids": [5, 9, 14, 3]}, sp)[0]
    comp = out.outputs[0]
    for token, position in zip(comp.token_ids, comp.logprobs):
        chosen = position[token]
        assert isinstance(chosen, Logprob) and chosen.logprob == float(chosen)
        assert chosen.decoded_token == llm.tokenizer.decode([token])
        others = [lp for t, lp in position.items() if t != token]
        assert all(lp.rank == 1 + sum(o > lp for o in position.values()) for lp in others)  # the top k's places
        assert chosen.rank == 1 + sum(o > chosen for o in others) if chosen.rank <= k else all(o > chosen for o in others)
    assert comp.cumulative_logprob == pytest.approx(sum(p[t].logprob for p, t in zip(comp.logprobs, comp.token_ids)))
    assert out.prompt_logprobs[0] is None and out.prompt_logprobs[1][9].rank == out.prompt_ranks[1]
    assert pickle.loads(pickle.dumps(comp.logprobs)) == comp.logprobs
    greedy = llm.generate("hi", SamplingParams(max_tokens=4, temperature=0, logprobs=0))[0].outputs[0]
    assert [p[t].rank for p, t in zip(greedy.logprobs, greedy.token_ids)] == [1] * len(greedy.token_ids)
    assert llm.generate("hi", GREEDY)[0].outputs[0].cumulative_logprob is None  # vLLM's: none without logprobs


def test_a_stop_token_ends_the_token_ids_but_not_the_text(llm):
    """vLLM leaves the stop_token_ids token's text out of CompletionOutput.text (include_stop_str_in_output
    puts it in) and keeps its id in token_ids; hearth wrote its text."""
    prompt = {"prompt_token_ids": [5, 9, 14, 3]}
    free = llm.generate(prompt, GREEDY)[0].outputs[0].token_ids
    at = next(i for i, t in enumerate(free) if t not in free[:i] and i >= 1)  # the first time this id comes
    stop = free[at]

    def run(**kw):
        return llm.generate(prompt, SamplingParams(temperature=0, max_tokens=6, stop_token_ids=[stop], **kw))[0].outputs[0]

    def text_of(n):
        return llm.generate(prompt, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))[0].outputs[0].text

    cut = run()
    assert cut.token_ids == free[:at + 1] and cut.stop_reason == stop and cut.finish_reason == "stop"
    assert cut.text == text_of(at)
    assert run(include_stop_str_in_output=True).text == text_of(at + 1)


def test_none_for_vllms_optional_lists_is_none_of_them(llm):
    """vLLM types stop, stop_token_ids and bad_words as Optional: stop=None was a TypeError here, and
    stop_token_ids=None passed SamplingParams and then failed the engine step."""
    sp = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True, stop=None, stop_token_ids=None, bad_words=None)
    assert (sp.stop, sp.stop_token_ids, sp.bad_words) == ([], [], [])
    assert len(llm.generate("hi", sp)[0].outputs[0].token_ids) == 3


def test_vllms_top_level_names_import_from_hearth(llm):
    """`from vllm import LLM, SamplingParams, TokensPrompt, RequestOutput` ported to hearth: TokensPrompt was
    an ImportError."""
    from hearth import CompletionOutput, LoRARequest, RequestOutput, TextPrompt, TokensPrompt  # noqa: F401

    out = llm.generate([TokensPrompt(prompt_token_ids=[5, 9]), TextPrompt(prompt="hi")], GREEDY)
    assert isinstance(out[0], RequestOutput) and out[0].prompt_token_ids == [5, 9] and out[1].prompt == "hi"


def test_embed_takes_vllms_use_tqdm_and_truncate_prompt_tokens(llm):
    ids = [5, 9, 14, 3, 8]
    cut = llm.embed({"prompt_token_ids": ids}, use_tqdm=False, truncate_prompt_tokens=3)[0]
    assert cut.prompt_token_ids == ids[-3:]
    assert cut.outputs.embedding == llm.embed({"prompt_token_ids": ids[-3:]})[0].outputs.embedding


def test_default_sampling_params_are_the_files_own(llm):
    """vLLM's examples start from llm.get_default_sampling_params() (the model's generation_config): an
    AttributeError here. A GGUF carries the same defaults as general.sampling.*."""
    from hearth.loader.sampling_defaults import file_sampling

    assert llm.get_default_sampling_params() == SamplingParams()  # the tiny file has none
    meta = {"general.sampling.temp": 0.6, "general.sampling.top_k": 20, "general.sampling.top_p": 0.95}
    assert SamplingParams(**file_sampling(meta)) == SamplingParams(temperature=0.6, top_k=20, top_p=0.95)


def test_none_engine_arguments_are_hearths_defaults(tiny):
    """vLLM's EngineArgs are Optional (None: the engine's choice): max_model_len=None was an error here, and
    enable_prefix_caching=None turned prefix caching off."""
    llm = LLM(tiny, progress=False, max_model_len=None, seed=None, max_num_seqs=None, enable_prefix_caching=None,
              block_size=None, speculative_config=None)
    assert llm.config.enable_prefix_caching is True and llm.config.seed == 0 and llm.config.block_size == 16


def test_logprobs_minus_one_is_the_whole_vocabulary_where_max_logprobs_allows(tiny, llm):
    """vLLM's logprobs=-1: every token's logprob, within max_logprobs (-1 there too); it was refused here."""
    whole = LLM(tiny, max_model_len=128, progress=False, max_logprobs=-1)
    out = whole.generate("hi", SamplingParams(max_tokens=2, temperature=0, logprobs=-1, prompt_logprobs=-1))[0]
    vocab = whole.model_config.vocab_size
    assert all(len(p) == vocab for p in out.outputs[0].logprobs) and len(out.prompt_logprobs[-1]) == vocab
    with pytest.raises(ValueError, match="whole vocabulary"):
        llm.generate("hi", SamplingParams(logprobs=-1))  # the default cap refuses it, naming why
