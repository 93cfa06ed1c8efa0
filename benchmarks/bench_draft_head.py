"""CPU time of a draft model's decode step and of its head, full and reduced (speculative_config
draft_vocab): time.thread_time on 1 thread, so the ratios hold on a busy machine too.

    .venv/bin/python benchmarks/bench_draft_head.py                      # qwen2.5-coder-0.5b
    .venv/bin/python benchmarks/bench_draft_head.py --sizes 16384,32768

--target: speculation in-process instead (the draft at draft_quant q4_0, K = 4, cost_aware off so
every size drafts the same lengths for the same acceptance): per workload and size, drafts accepted
per drafted and per drafting step, whether the text equals plain greedy, and the draft's one-token
forward (median CPU ms during the runs, then interleaved over the sizes at one position):

    .venv/bin/python benchmarks/bench_draft_head.py --target qwen2.5-coder-1.5b --sizes 0,65536,32768
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
from hearth.loader.gguf_loader import GGUFFile, head_tensor  # noqa: E402
from hearth.loader.resolve import resolve_model  # noqa: E402
from hearth.runner.draft_quant import requantized  # noqa: E402
from hearth.runner.draft_vocab import DraftVocab  # noqa: E402


def cpu_ms(fn, n: int = 40) -> float:
    xs = []
    for _ in range(n):
        t = time.thread_time()
        fn()
        xs.append(time.thread_time() - t)
    return statistics.median(xs) * 1e3


def head_costs(args) -> None:
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
    for n in _sizes(args):
        vocab = DraftVocab(head_tensor(llm.gguf), n, llm.backend, keep=llm.tokenizer.special_ids)
        vocab.see("r", ids)
        print(f"draft_vocab {n}: head + prompt rows + argmax {cpu_ms(lambda: vocab.logits(x, ['r']).argmax(-1)):.2f} ms")


def acceptance(args) -> None:
    spec = {"method": "draft", "model": args.model, "num_speculative_tokens": 4, "cost_aware": False,
            "draft_quant": "q4_0", "draft_vocab": 0}
    llm = LLM(args.target, progress=False, threads=1, max_model_len=4096, speculative_config=spec)
    plain = LLM(args.target, progress=False, threads=1, max_model_len=4096)
    d = llm.runner.drafter
    g = requantized(GGUFFile(resolve_model(args.model)), "q4_0", llm.backend)  # the file the draft runs
    vocabs = {n: DraftVocab(head_tensor(g), n, llm.backend, keep=llm.tokenizer.special_ids) if n else None
              for n in _sizes(args)}
    times, forward, size = collections.defaultdict(list), d._forward, [0]

    def timed(batch, out_seqs, rids=()):  # one sequence's one-token step: the draft's forward per token
        t = time.thread_time()
        r = forward(batch, out_seqs, rids)
        if out_seqs and len(batch) == 1 and len(batch[0][1]) == 1:
            times[size[0]].append(time.thread_time() - t)
        return r
    d._forward = timed
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    for w in args.workloads.split(","):
        ids = llm.encode_chat(list(prompts.spec_prompt(w).messages))
        want = plain.generate([{"prompt_token_ids": ids}], params)[0].outputs[0].token_ids
        for n, vocab in vocabs.items():
            size[0], d.vocab = n, vocab
            llm.engine.scheduler.kv.pool.reset_prefix_cache()
            s = llm.engine.spec.stats
            before = (s.num_draft_tokens, s.num_accepted_tokens, s.num_drafts)
            got = llm.generate([{"prompt_token_ids": ids}], params)[0].outputs[0].token_ids
            dr, ac, steps = (a - b for a, b in zip((s.num_draft_tokens, s.num_accepted_tokens, s.num_drafts), before))
            print(f"{w} draft_vocab {n or 'full'}: accepted {ac} / drafted {dr} ({ac / max(dr, 1):.3f}), "
                  f"{ac / max(steps, 1):.2f} per drafting step ({steps}), text = plain greedy: {got == want}", flush=True)
    print("one-token draft forward during the runs, median cpu ms:",
          {n or "full": round(statistics.median(v) * 1e3, 2) for n, v in times.items()})
    inter = collections.defaultdict(list)
    for _ in range(30):  # interleaved: each size in turn, the same token at one position of block 0
        for n, vocab in vocabs.items():
            d.vocab = vocab
            if vocab is not None:
                vocab.see("x", ids)
            inter[n].append(cpu_ms(lambda: forward([(5, [ids[5]], [0])], [0], ["x"]).argmax(-1), n=1))
    print("interleaved one-token draft forward + argmax, median cpu ms:",
          {n or "full": round(statistics.median(v), 2) for n, v in inter.items()})


def _sizes(args) -> list[int]:
    return [int(v) for v in args.sizes.split(",")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b", help="the draft model")
    ap.add_argument("--sizes", default="32768,65536", help="draft_vocab values (0: the whole head)")
    ap.add_argument("--target", default="", help="run speculation with this target (acceptance per size)")
    ap.add_argument("--workloads", default="code-gen,chat")
    ap.add_argument("--max-tokens", type=int, default=192)
    args = ap.parse_args()
    torch.set_num_threads(1)
    (acceptance if args.target else head_costs)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
