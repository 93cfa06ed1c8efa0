"""/metrics counts the scheduler's preemptions as vLLM's vllm:num_preemptions (hearth:num_preemptions_total): a
tiny engine with too few KV blocks for its sequences preempts, and the counter says how often."""

from __future__ import annotations

from types import SimpleNamespace

from hearth.api.metrics import Metrics
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from hearth.sampling_params import SamplingParams
from tests.gguf_factory import write_tiny_gguf


def test_preemptions_are_counted(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "qwen2", context=1024, tied=False)
    # 4 blocks of 16 tokens cannot hold 4 sequences of ~40 tokens: the newest are preempted
    llm = LLM(str(path), max_model_len=64, num_kv_blocks=4, max_num_batched_tokens=64, progress=False)
    engine = AsyncEngine(llm.engine)  # not started: the scrape reads its core's scheduler
    served = SimpleNamespace(name="tiny", engine=engine)

    def counter() -> str:
        rows = [x for x in Metrics(lambda: [served]).render().decode().splitlines() if x.startswith("hearth:num_pre")]
        return rows[0] if rows else ""

    assert counter() == 'hearth:num_preemptions_total{model_name="tiny"} 0.0'
    params = SamplingParams(max_tokens=30, temperature=0, ignore_eos=True)
    llm.generate([{"prompt_token_ids": [5 + i] * 10} for i in range(4)], params)
    n = llm.engine.scheduler.num_preemptions
    assert n > 0 and counter() == f'hearth:num_preemptions_total{{model_name="tiny"}} {float(n)}'
