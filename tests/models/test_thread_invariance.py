"""A native tier's answer does not depend on the thread count: the GEMV and GEMM split output rows over the
threads, prefill attention splits rows, and a decode row's key ranges follow its own key count
(csrc/attention_tasks.h). So greedy tokens and their logprobs are the same bits at 1 and 2 threads: a user's
--threads changes the speed, never the answer."""

from __future__ import annotations

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.kernels import tiers


@pytest.mark.skipif(tiers.active() == "torch", reason="torch's own matmuls split their sums by the thread count")
def test_greedy_tokens_and_logprobs_are_the_same_bits_at_one_and_two_threads(model_path):
    llm = LLM(str(model_path("smollm2-135m")), max_model_len=1024, enable_prefix_caching=False, progress=False)
    words = "The lighthouse keeper counted the ships that passed in the night. "
    # 700 and 300 keys: decode attention split into ranges; 20: one range
    prompts = [{"prompt_token_ids": llm.tokenizer.encode(words * n)[:n]} for n in (700, 300, 20)]
    params = SamplingParams(temperature=0, max_tokens=12, logprobs=3, ignore_eos=True)
    threads, answers = torch.get_num_threads(), {}
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            answers[t] = [(o.outputs[0].token_ids, o.outputs[0].logprobs)
                          for o in llm.generate(prompts, params)]
    finally:
        torch.set_num_threads(threads)
    assert answers[1] == answers[2]
