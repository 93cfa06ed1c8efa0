"""A head shape the native paged attention does not take (head_dim 16 or 48: its kernels cover 32, 64, 80, 96,
128, 256 and 512) runs torch's attention, which sums a verify row unlike a decode row: the tiny head_dim-16
file speculated, and its logprobs differed from plain decoding's in their last bits wherever a step verified
drafts (found by tests/spec_decode/test_fuzz_equivalence.py on the default tiny dims). Speculation is now off
for such a model, and the load says why."""

from __future__ import annotations

import pytest

from hearth import LLM, SamplingParams
from hearth.kernels import native
from tests.gguf_factory import write_tiny_gguf


@pytest.mark.usefixtures("native_speculation")
def test_the_native_attention_says_which_heads_it_takes():
    assert native.paged_attention_covers(2, 1, 32) and native.paged_attention_covers(9, 3, 64)
    assert not native.paged_attention_covers(4, 2, 16) and not native.paged_attention_covers(4, 2, 48)
    assert not native.paged_attention_covers(4, 3, 64)  # heads not a multiple of the kv heads


@pytest.mark.usefixtures("native_speculation")
def test_a_model_whose_attention_runs_torchs_does_not_speculate(tmp_path, caplog):
    path = tmp_path / "hd16.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0")  # 4 heads of 16: native linears, torch's attention
    prompts = [{"prompt_token_ids": [1, 2, 3, 4, 5, 6]}, {"prompt_token_ids": [7, 8, 9, 10]}]
    p = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=2)
    want = LLM(str(path), progress=False).generate(prompts, p)
    with caplog.at_level("WARNING", logger="hearth"):
        llm = LLM(str(path), progress=False, speculative_config={"method": "draft", "model": str(path),
                                                                 "num_speculative_tokens": 2, "cost_aware": False})
    assert llm.speculation_off.startswith("with head_dim 16, which the native attention does not take")
    assert "speculative decoding is off: with head_dim 16" in caplog.text
    got = llm.generate(prompts, p)
    assert [g.outputs[0].logprobs for g in got] == [w.outputs[0].logprobs for w in want]
