"""CPU time of a draft model's decode step and of its head, full and reduced (speculative_config
draft_vocab): time.thread_time on 1 thread, so the ratios hold on a busy machine too.

    .venv/bin/python benchmarks/bench_draft_head.py                      # qwen2.5-coder-0.5b
    .venv/bin/python benchmarks/bench_draft_head.py --sizes 16384,32768
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from hearth import LLM, SamplingParams  # noqa: E402
from hearth.bench.spec import prompts  # noqa: E402
from hearth.loader.gguf_loader import head_tensor  # noqa: E402
from hearth.runner.draft_vocab import DraftVocab  # noqa: E402


def cpu_ms(fn, n: int = 40) -> float:
    xs = []
    for _ in range(n):
        t = time.thread_time()
        fn()
        xs.append(time.thread_time() - t)
    return statistics.median(xs) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--sizes", default="32768,65536")
    args = ap.parse_args()
    torch.set_num_threads(1)
    llm = LLM(args.model, progress=False, threads=1, max_model_len=4096)
    m, acc = llm.model, collections.defaultdict(list)
    head, step = m.compute_logits, llm.engine.step

    def timed(key, fn):
        def run(*a):
            t = time.thread_time()
            r = fn(*a)
            acc[key].append(time.thread_time() - t)
            return r
        return run
    m.compute_logits, llm.engine.step = timed("head", head), timed("step", step)
    ids = llm.encode_chat(list(prompts.spec_prompt("code-gen").messages))
    llm.generate([{"prompt_token_ids": ids}], SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    s, h = (statistics.median(acc[k][2:]) * 1e3 for k in ("step", "head"))
    print(f"{args.model}: decode step {s:.2f} ms cpu, head {h:.2f} ms ({h / s:.0%})")
    x = torch.randn(1, m.cfg.hidden_size)
    print(f"full head + argmax: {cpu_ms(lambda: head(x).argmax(-1)):.2f} ms")
    for n in (int(v) for v in args.sizes.split(",")):
        vocab = DraftVocab(head_tensor(llm.gguf), n, llm.backend, keep=llm.tokenizer.special_ids)
        vocab.see("r", ids)
        print(f"draft_vocab {n}: head + prompt rows + argmax {cpu_ms(lambda: vocab.logits(x, ['r']).argmax(-1)):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
