"""Fidelity: the KL divergence of hearth's logits from the f32 reference (transformers on the same GGUF,
benchmarks/make_reference.py) is no higher than llama.cpp's on the same positions (recorded by
benchmarks/make_goldens.py --kld), on each path a token's logits can take — a prefill chunk, a
single-stream decode step, a batched decode step — at whatever CPU tier this run forces.

Teacher-forced on the golden cases: the prompt, then llama.cpp's greedy tokens fed back. KL is taken
over the reference's top 32 tokens plus one bucket for the rest (hearth.bench.kld), for both engines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hearth import LLM
from hearth.bench.kld import lumped_kl_of_logits
from hearth.kernels import tiers
from hearth.kernels.attention import AttentionMetadata
from tests.teacher_forced import LOWER_TIER_CASES, at_lower_tier, prefetch
from tests.teacher_forced import teacher_forced as forced

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference"
GOLDENS = REFERENCE.parent / "goldens"
MODELS = ["smollm2-135m", "qwen2.5-coder-0.5b"]
DECODE_CASES, DECODE_STEPS = 8, 32
"""Cases run one token per step (single-stream and batched), and their first steps: 256 positions a path."""
PREFILL_CASES = {"qwen2.5-coder-0.5b": 12}
"""Cases whose prefill KL is taken (default: all 34): the 0.5B's first 12, the rows the goldens' teacher-forced test
reads too (tests/test_golden_llamacpp.py LIMIT), so they are computed once. Measured 2026-12-07 at avx512,
hearth/llama.cpp on the first 12 and on all 34: 0.40 and 0.37 as shipped; rope base x1.05 0.46, 0.41; x0.5 4.3,
6.2; norms' eps x10 0.62, 0.56; x100 16.3, 16.7: the 12 (9 with KL well above 0) rank a setting as the 34 do."""
BOUND = {"prefill": 1.0, "decode": 1.25}
"""hearth's mean KL over llama.cpp's, at most. Decode is not yet at 1.0 (issue "Every CPU", point 3):
its 8-bit activations follow ggml's q8 rule as llama.cpp's do, and measured 1.05-1.12x llama.cpp's
on SmolLM2 (one sequence), 0.8x batched; this bound catches a regression until the cause is found."""


class TeacherForcer:
    """Feeds token rows through the model over the runner's paged cache, a block range per sequence,
    and returns each row's logits: prefill chunks and decode steps are the runner's own forward."""

    def __init__(self, llm: LLM, max_len: int):
        self.llm, self.bs = llm, llm.config.block_size
        self.per_seq = -(-max_len // self.bs)
        self.lens: dict[int, int] = {}

    def step(self, rows: dict[int, list[int]]) -> list[torch.Tensor]:
        """{sequence: its new tokens} -> per sequence, [len(new), vocab] f32 logits."""
        ids, positions, slots, qsl, seq_lens, tables = [], [], [], [0], [], []
        for seq, new in rows.items():
            start = self.lens.get(seq, 0)
            table = list(range(seq * self.per_seq, (seq + 1) * self.per_seq))
            pos = range(start, start + len(new))
            ids += new
            positions += pos
            slots += [table[p // self.bs] * self.bs + p % self.bs for p in pos]
            qsl.append(qsl[-1] + len(new))
            seq_lens.append(start + len(new))
            tables.append(table)
            self.lens[seq] = start + len(new)
        meta = AttentionMetadata(qsl, seq_lens, tables, torch.tensor(slots), self.bs)
        with torch.inference_mode():
            hidden = self.llm.model(torch.tensor(ids), torch.tensor(positions), meta, self.llm.runner.kv_caches)
            logits = self.llm.model.compute_logits(hidden).float()
        return list(logits.split([len(r) for r in rows.values()]))


@pytest.fixture(scope="module", params=MODELS)
def fidelity(request, model_path):
    name = request.param
    ref = np.load(REFERENCE / f"{name}.npz")
    cases = json.loads((GOLDENS / f"greedy_{name}.json").read_text())["cases"]
    peer = json.loads((REFERENCE / f"{name}_llamacpp.json").read_text())
    assert str(ref["gguf_sha256"]) == peer["reference_gguf_sha256"] == peer["gguf_sha256"]
    llm = LLM(str(model_path(name)), max_model_len=1024, progress=False, kv_cache_memory_gb=0.5)
    return name, ref, cases, peer, llm


def kl(ref, i: int, logits: torch.Tensor, steps: int | None = None) -> np.ndarray:
    """[steps] KL at case i's first `steps` reference positions (all by default) from logits [steps, V]."""
    return lumped_kl_of_logits(ref["ids"][i][:steps], ref["logprobs"][i][:steps], logits.numpy())


def teacher_forced(cases, ref, i: int) -> tuple[list[int], list[int]]:
    steps = ref["ids"].shape[1]
    return cases[i]["prompt_token_ids"], cases[i]["new_token_ids"][:steps]


def decode_kls(llm: LLM, cases, ref, group: list[list[int]]) -> list[np.ndarray]:
    """Each group of cases decoded together, one token per sequence per step (a group of one is a
    single-stream decode): the KL at every reference position of each case, case order."""
    steps = DECODE_STEPS
    out = {}
    for members in group:
        forcer = TeacherForcer(llm, 1024)
        rows = {i: [] for i in members}
        for i, logits in zip(members, forcer.step({i: teacher_forced(cases, ref, i)[0] for i in members})):
            rows[i].append(logits[-1:])
        for s in range(steps - 1):
            feed = {i: [teacher_forced(cases, ref, i)[1][s]] for i in members}
            for i, logits in zip(members, forcer.step(feed)):
                rows[i].append(logits)
        out.update({i: kl(ref, i, torch.cat(rows[i]), steps) for i in members})
    return [out[i] for i in sorted(out)]


def check(path: str, hearth: list[np.ndarray], peer: list[list[float]], name: str) -> None:
    ours, theirs = float(np.mean(hearth)), float(np.mean(peer))
    bound = BOUND["prefill" if path == "prefill" else "decode"]
    print(f"{name} [{tiers.active()}] {path}: KL {ours:.5f} vs llama.cpp {theirs:.5f} ({ours / theirs:.2f}x)")
    assert ours <= bound * theirs, (f"{name} at tier {tiers.active()}, {path}: mean KL from the f32 reference "
                                    f"{ours:.5f} > {bound} x llama.cpp's {theirs:.5f} on the same positions")


def test_prefill_kl_at_most_llama_cpp(fidelity):
    name, ref, cases, peer, llm = fidelity
    cases = cases[:LOWER_TIER_CASES[name] if at_lower_tier() else PREFILL_CASES.get(name)]
    # one prefill of each case's prompt + tokens (tests/teacher_forced.py), which the goldens reuse
    prefetch(llm, name, cases, ref)
    ours = [forced(llm, name, case, i, ref).kl for i, case in enumerate(cases)]
    check("prefill", ours, peer["prefill"][:len(cases)], name)


def test_single_stream_decode_kl_at_most_llama_cpp(fidelity):
    name, ref, cases, peer, llm = fidelity
    ours = decode_kls(llm, cases, ref, [[i] for i in range(DECODE_CASES)])
    check("single-stream decode", ours, [c[:DECODE_STEPS] for c in peer["decode"][:DECODE_CASES]], name)


@pytest.mark.parametrize("batch", [4, 12])
def test_batched_decode_kl_at_most_llama_cpp(fidelity, batch):
    # llama.cpp's figure is its decode path's at the same positions
    name, ref, cases, peer, llm = fidelity
    ours = decode_kls(llm, cases, ref, [list(range(batch))])
    check(f"batched decode x{batch}", ours, [c[:DECODE_STEPS] for c in peer["decode"][:batch]], name)
