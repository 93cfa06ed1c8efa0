"""Suffix cache vs prompt lookup vs plain decoding, back to back in one process on one model:
a code edit sent twice (the second time the suffix cache has the first answer) and a chat question
after other chat answers (drafts from the cache keep failing there). Greedy; the text of every
speculative run is checked against plain. Prints a table of median tok/s and ratios to plain.

    python benchmarks/bench_suffix_repeat.py qwen2.5-coder-1.5b --rounds 3 --tokens 256
"""

from __future__ import annotations

import argparse
import statistics
import time

from hearth import LLM, SamplingParams
from hearth.bench.corpus import chat, code_file
from hearth.spec_decode.config import SpeculativeConfig
from hearth.spec_decode.policy import SpeculativeDecoder


def edit_prompt() -> str:
    code = "".join(code_file("inventory.py.txt").splitlines(keepends=True)[:40])
    return f"Rename the class Inventory to Stock everywhere and return the whole file.\n\n```python\n{code}```"


def run(llm: LLM, spec, prompt_ids, params) -> tuple[float, list[int], float]:
    """-> (decode tok/s after the first token, token ids, acceptance length)."""
    llm.engine.spec = spec
    s = spec.stats if spec is not None else None
    acc0 = s.num_accepted_tokens if s else 0
    t0 = time.perf_counter()
    out = llm.generate({"prompt_token_ids": prompt_ids}, params)[0].outputs[0]
    dt = time.perf_counter() - t0
    acc = (s.num_accepted_tokens - acc0) if s else 0
    n = len(out.token_ids)
    return n / dt, out.token_ids, n / max(1, n - acc)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    llm = LLM(a.model, progress=False, max_model_len=4096, threads=a.threads,
              speculative_config={"method": "ngram"})
    params = SamplingParams(temperature=0, max_tokens=a.tokens, ignore_eos=True)
    enc = lambda text: llm.encode_chat([{"role": "user", "content": text}])  # noqa: E731
    edit = enc(edit_prompt())
    questions = chat()["questions"]
    others, failing = [enc(q) for q in questions[:3]], enc(questions[4])
    ngram = SpeculativeDecoder(SpeculativeConfig.parse({"method": "ngram"}))
    suffix_cfg = SpeculativeConfig.parse({"method": "suffix"})
    plain_edit = run(llm, None, edit, params)[1]  # warm-up, and the prompts' prefixes cached for all
    plain_chat = run(llm, None, failing, params)[1]
    rows: dict[str, list[tuple[float, float]]] = {}
    same: dict[str, bool] = {}

    def record(name, r, want):
        rows.setdefault(name, []).append((r[0], r[2]))
        same[name] = same.get(name, True) and r[1] == want
        print(f"  ({name}: {r[0]:.1f} tok/s, acceptance length {r[2]:.2f})", flush=True)

    for _ in range(a.rounds):
        record("edit plain", run(llm, None, edit, params), plain_edit)
        record("edit ngram", run(llm, ngram, edit, params), plain_edit)
        fresh = SpeculativeDecoder(suffix_cfg)
        record("edit suffix, first sight", run(llm, fresh, edit, params), plain_edit)
        record("edit suffix, repeated", run(llm, fresh, edit, params), plain_edit)
        cached = SpeculativeDecoder(suffix_cfg)
        for q in others:  # other answers in the cache: their drafts fail on this question
            run(llm, cached, q, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True))
        record("chat plain", run(llm, None, failing, params), plain_chat)
        record("chat suffix, failing drafts", run(llm, cached, failing, params), plain_chat)
        record("chat ngram", run(llm, ngram, failing, params), plain_chat)
    med = {k: statistics.median(x[0] for x in v) for k, v in rows.items()}
    print(f"{a.model}, {a.tokens} tokens greedy, {a.threads} threads, median of {a.rounds}")
    for k, v in rows.items():
        base = med["edit plain" if k.startswith("edit") else "chat plain"]
        acc = statistics.median(x[1] for x in v)
        print(f"  {k:30s} {med[k]:6.1f} tok/s  {med[k] / base:5.2f}x  acceptance length {acc:4.2f}  "
              f"same text as plain: {same[k]}")


if __name__ == "__main__":
    main()
