"""Speculative decoding under load (issue 19, point 5: "aggregate throughput at 16 and 64 concurrent
sequences is no worse than without speculation"): N requests at once, built from bench_spec's
workloads (code-edit, code-gen, chat, drafts-fail, in turn), through one in-process engine per variant, greedy;
hearth plain vs each proposer. Reported per (variant, N): aggregate output tok/s, its ratio to
plain, whether every request's tokens equal plain's at the same N, acceptance, and the policy's
decisions (share of decode steps that drafted, that the batch size turned off, paused
request-steps), from which hearth.spec_decode.thresholds is set.

    .venv/bin/python benchmarks/bench_spec_concurrency.py                # 1.5B + 0.5B draft, N = 16, 64
    .venv/bin/python benchmarks/bench_spec_concurrency.py --quick        # smoke: SmolLM2 drafting itself, N = 2
    .venv/bin/python benchmarks/bench_spec_concurrency.py --concurrency 16 \\
        --hearth-configs '{"plain": null, "ngram-always": {"method": "ngram", "disable_by_batch_size": 0}}'
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hearth import LLM, SamplingParams  # noqa: E402
from hearth.bench import BenchError  # noqa: E402
from hearth.bench.report import policy_text  # noqa: E402
from hearth.bench.spec import prompts, variants  # noqa: E402
from hearth.loader.resolve import resolve_model  # noqa: E402

DEFAULT = variants.DEFAULT_HEARTH  # plain, ngram, draft, draft tree, suffix
COUNTERS = ("num_draft_tokens", "num_accepted_tokens", "num_steps", "num_steps_drafting",
            "num_steps_batch_off", "num_paused")


def counts(llm: LLM) -> dict:
    spec = llm.engine.spec
    return {k: getattr(spec.stats, k) for k in COUNTERS} if spec is not None else {}


def run_level(llm: LLM, requests: list[list[int]], max_tokens: int) -> dict:
    """All requests at once; -> tokens per request, wall seconds, counter deltas."""
    llm.engine.scheduler.kv.pool.reset_prefix_cache()  # every level starts cold
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    before = counts(llm)
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": ids} for ids in requests], params)
    wall = time.perf_counter() - t0
    after = counts(llm)
    return {"tokens": [o.outputs[0].token_ids for o in outs], "wall_s": wall,
            "spec": {k: after[k] - before[k] for k in after}}


def row(name: str, n: int, level: dict, plain: dict | None) -> dict:
    out = sum(len(t) for t in level["tokens"])
    tok_s = out / level["wall_s"]
    spec = level["spec"]
    r = {"variant": name, "concurrency": n, "output_tokens": out, "tok_s": round(tok_s, 2),
         "vs_plain": round(tok_s / plain["tok_s"], 3) if plain else None,
         "same_tokens_as_plain": None if plain is None else level["tokens"] == plain["tokens"]}
    if spec:
        r["accepted"], r["drafted"] = spec["num_accepted_tokens"], spec["num_draft_tokens"]
        r["policy"] = policy_text({"steps": spec["num_steps"], "steps_drafting": spec["num_steps_drafting"],
                                   "steps_batch_off": spec["num_steps_batch_off"], "paused": spec["num_paused"]})
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b")
    ap.add_argument("--concurrency", default="16,64", help="comma-separated numbers of concurrent requests")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workloads", default=",".join(prompts.names()))
    ap.add_argument("--hearth-configs", default=None, help='JSON {"name": speculative_config or null}; '
                    'the first must be null (plain, the reference); "{draft}" stands for --draft')
    ap.add_argument("--quick", action="store_true", help="smoke test: SmolLM2 drafting itself, N = 2, 8 tokens")
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.quick:
        args.model = args.draft = "smollm2-135m"
        args.concurrency, args.max_tokens = "2", 8
    try:
        table = variants.parse_variants("hearth", args.hearth_configs, DEFAULT, "--hearth-configs")
        if not table or table[0].config is not None:
            raise BenchError("--hearth-configs: the first variant must be null (plain, the reference)")
        levels = [int(x) for x in args.concurrency.split(",")]
        work = [prompts.spec_prompt(w.strip()) for w in args.workloads.split(",")]
        model, draft = resolve_model(args.model), resolve_model(args.draft)
    except (BenchError, ValueError) as e:
        print(f"bench_spec_concurrency: {e}", file=sys.stderr)
        return 2
    rows, plain = [], {}
    for v in table:
        spec = variants._fill(v.config, Path(draft)) if v.config is not None else None
        llm = LLM(str(model), progress=False, threads=args.threads, max_num_seqs=max(levels),
                  max_model_len=variants.CTX, speculative_config=spec)
        encoded = [llm.encode_chat(list(p.messages)) for p in work]
        for n in levels:
            level = run_level(llm, [encoded[i % len(encoded)] for i in range(n)], args.max_tokens)
            r = row(v.name, n, level, plain.get(n))
            if v.config is None:
                plain[n] = {"tok_s": r["tok_s"], "tokens": level["tokens"]}
            rows.append(r)
            print(json.dumps(r), flush=True)
        llm.close()
        del llm
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
