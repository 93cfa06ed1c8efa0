"""The draft model's K/V (same block ids as the target's, its own f16 tensors) counts in
kv_cache_memory_gb: both caches together stay within it."""

from hearth import LLM


def test_target_and_draft_kv_fit_the_budget_together(model_path):
    smol = str(model_path("smollm2-135m"))
    budget_gb = 0.05  # below what 16 full-length sequences want, so the budget decides the size
    llm = LLM(smol, progress=False, kv_cache_memory_gb=budget_gb,
              speculative_config={"method": "draft", "model": smol})
    target, draft = llm.runner.kv_bytes, sum(t.nbytes for t in llm.runner.drafter.kv_caches)
    assert draft == target  # the same model drafting: the same bytes per block
    assert target + draft <= budget_gb * 2**30
    alone = LLM(smol, progress=False, kv_cache_memory_gb=budget_gb)
    assert alone.runner.kv_bytes > target  # without a draft, the target gets the whole budget
