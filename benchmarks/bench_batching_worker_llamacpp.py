"""llama.cpp side of bench_batching.py; runs under /work/llamacpp-venv/bin/python.

llama.cpp's own continuous batching through its low-level API, the way llama-server's parallel slots
drive it (tools/server/server-context.cpp update_slots): one context with n_seq_max = N sequences
(a KV cache of `ctx_per_seq` cells each, not unified, as the server sets up with an explicit -np);
each step is one llama_decode of one batch of at most n_batch tokens: first one token per sequence
that is generating, then prompt chunks of the sequences still in prefill, in arrival order. Logits
are requested only where a token is sampled (the last prompt token, every decode token); greedy =
argmax per row. Timestamps are taken after each step, so bench_batching.py computes the same
metrics for both engines.
"""

from __future__ import annotations

import ctypes
import time

import llama_cpp
import numpy as np
from llama_cpp import _logger

from bench_batching import serve_worker

FLASH_ATTN = {"auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
              "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}


class BatchedLlama:
    """One model, one N-sequence context and one reusable batch of n_batch token slots."""

    def __init__(self, job: dict):
        _logger.set_verbose(False)  # llama.cpp's load log would drown the progress lines
        llama_cpp.llama_backend_init()
        n_seqs, t = job["n_seqs"], job["threads"]
        self.model = llama_cpp.llama_model_load_from_file(job["model"].encode(),
                                                         llama_cpp.llama_model_default_params())
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {job['model']}")
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = n_seqs * job["ctx_per_seq"]  # split evenly across sequences when not unified
        cp.n_batch = job["max_batched_tokens"]
        cp.n_ubatch = min(512, cp.n_batch)  # llama-server's default physical batch
        cp.n_seq_max = n_seqs
        cp.n_threads = cp.n_threads_batch = t
        cp.kv_unified = False  # distinct prompts share no prefix (llama.h: "try to disable" then)
        cp.flash_attn_type = FLASH_ATTN[job["llamacpp_flash_attn"]]
        cp.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise SystemExit("llama.cpp could not create the context")
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        self.n_batch = max(cp.n_batch, n_seqs)
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        # numpy views of the batch's arrays: filling 2,048 slots per prefill step stays cheap
        b, cap = self.batch, self.n_batch
        self.tok = np.ctypeslib.as_array(b.token, shape=(cap,))
        self.pos = np.ctypeslib.as_array(b.pos, shape=(cap,))
        self.want = np.ctypeslib.as_array(b.logits, shape=(cap,))
        np.ctypeslib.as_array(b.n_seq_id, shape=(cap,))[:] = 1
        self.seq_slots = [b.seq_id[i] for i in range(cap)]  # int32[1] per token slot

    def decode(self, entries: list[tuple[int, int, int, bool]]) -> np.ndarray:
        """One llama_decode of (token, pos, seq, sample?) entries; returns the argmax of each
        sampled row, in batch order."""
        n = len(entries)
        toks, poss, seqs, want = zip(*entries)
        self.tok[:n], self.pos[:n], self.want[:n] = toks, poss, want
        for slot, s in zip(self.seq_slots, seqs):
            slot[0] = s
        self.batch.n_tokens = n
        rc = llama_cpp.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise SystemExit(f"llama_decode returned {rc} for a batch of {n} tokens")
        rows = int(sum(want))
        # logits: [rows, n_vocab], the rows whose `logits` flag was set, in batch order (llama.h)
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self.ctx), shape=(rows, self.n_vocab))
        return logits.argmax(axis=1)

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)


def step_entries(prompts: list[list[int]], fed: list[int], outs: list[list[int]], max_tokens: int,
                 n_batch: int) -> list[tuple[int, int, int, bool]]:
    """llama-server's batch order: one token per generating sequence, then prompt chunks."""
    entries = [(o[-1], len(p) + len(o) - 1, s, True)
               for s, (p, o) in enumerate(zip(prompts, outs)) if 0 < len(o) < max_tokens]
    budget = n_batch - len(entries)
    for s, p in enumerate(prompts):
        if budget <= 0:
            break
        k = min(len(p) - fed[s], budget)
        if k <= 0:
            continue
        end = fed[s] + k
        entries += [(p[i], i, s, i == len(p) - 1) for i in range(fed[s], end)]
        fed[s], budget = end, budget - k
    return entries


def run(llm: BatchedLlama, prompts: list[list[int]], max_tokens: int) -> dict:
    llm.clear()
    fed, outs = [0] * len(prompts), [[] for _ in prompts]
    first, steps = [0.0] * len(prompts), []
    t0 = time.perf_counter()
    while any(len(o) < max_tokens for o in outs):
        entries = step_entries(prompts, fed, outs, max_tokens, llm.n_batch)
        sampled = llm.decode(entries)
        t = time.perf_counter() - t0
        seqs = [s for _, _, s, want in entries if want]
        for s, tok in zip(seqs, sampled.tolist()):
            if not outs[s]:
                first[s] = t
            outs[s].append(tok)
        steps.append((t, len(seqs)))
    return {"first_token_s": first, "steps": steps, "outputs": outs}


if __name__ == "__main__":
    serve_worker("llama.cpp", BatchedLlama, run, f"llama-cpp-python {llama_cpp.__version__}")
