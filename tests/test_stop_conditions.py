"""Stop conditions on the real SmolLM2: min_tokens bans end-of-generation and stop ids until it is
reached (vLLM's rule), stop_token_ids end with their id, ignore_eos runs to max_tokens, stop
strings are cut, and every finish reason is reported.

Each test sends its prompt once before the runs it compares: later runs then all start from the
same prefix-cache hit, so they share numerics (a miss computes the prompt in one pass, a hit only
its tail, and a greedy near-tie may go either way between the two)."""

from hearth import SamplingParams


def chat(llm, text):
    prompt = {"prompt_token_ids": llm.encode_chat([{"role": "user", "content": text}])}
    llm.generate(prompt, SamplingParams(temperature=0, max_tokens=1))  # cache its full blocks
    return prompt


def test_min_tokens_stop_ids_and_ignore_eos(smol_llm):
    prompt = chat(smol_llm, "Say hi.")
    eos = smol_llm.tokenizer.eog_ids
    free = smol_llm.generate(prompt, SamplingParams(temperature=0, max_tokens=64))[0].outputs[0]
    assert free.finish_reason == "stop" and free.stop_reason is None and len(free.token_ids) < 40
    assert free.token_ids[-1] in eos  # short answer ending with end-of-generation

    n = len(free.token_ids) + 10
    forced = smol_llm.generate(prompt, SamplingParams(temperature=0, max_tokens=64, min_tokens=n))[0].outputs[0]
    assert len(forced.token_ids) >= n and not set(forced.token_ids[:n]) & eos

    stop_id = free.token_ids[2]
    cut = smol_llm.generate(prompt, SamplingParams(temperature=0, max_tokens=64, stop_token_ids=[stop_id]))[0]
    comp = cut.outputs[0]
    assert comp.token_ids == free.token_ids[:free.token_ids.index(stop_id) + 1]
    assert comp.finish_reason == "stop" and comp.stop_reason == stop_id

    late = SamplingParams(temperature=0, max_tokens=64, stop_token_ids=[stop_id], min_tokens=3)
    comp = smol_llm.generate(prompt, late)[0].outputs[0]
    assert stop_id not in comp.token_ids[:3]

    long = smol_llm.generate(prompt, SamplingParams(temperature=0, max_tokens=50, ignore_eos=True))[0].outputs[0]
    assert len(long.token_ids) == 50 and long.finish_reason == "length"


def test_stop_string_waits_for_min_tokens(smol_llm):
    prompt = chat(smol_llm, "Count from 1 to 20.")
    text = smol_llm.generate(prompt, SamplingParams(temperature=0, max_tokens=40))[0].outputs[0].text
    assert "\n" in text
    first = smol_llm.generate(prompt, SamplingParams(temperature=0, max_tokens=40, stop=["\n"]))[0].outputs[0]
    assert first.text == text[: text.index("\n")] and first.stop_reason == "\n"
    later = smol_llm.generate(prompt, SamplingParams(temperature=0, max_tokens=40, stop=["\n"],
                                                     min_tokens=8))[0].outputs[0]
    assert len(later.text) > len(first.text) and later.finish_reason == "stop"
