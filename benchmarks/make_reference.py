"""The f32 reference the fidelity tests measure KL divergence from: Hugging Face transformers on
the same GGUF (dequantized to f32, eager attention), teacher-forced on the golden cases.

Run with hearth's venv (it has transformers), after `hearth pull MODEL`:

    .venv/bin/python benchmarks/make_reference.py [--models smollm2-135m qwen2.5-coder-0.5b]

For every golden case (tests/data/goldens/greedy_{model}.json) and each of its first --steps new
tokens, the reference distribution P after prompt + new[:i] is kept as its top --top-k token ids and
log-probabilities (tests/data/reference/{model}.npz). A KL divergence from P is then taken over those
K tokens plus one bucket for the rest of the vocabulary (hearth.bench.kld): the exact KL of the
coarse-grained distributions, a lower bound of the full one, and the same statistic for every engine.
benchmarks/make_goldens.py --kld (llama.cpp's venv) reads these files to record llama.cpp's figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from hearth.loader.resolve import resolve_model

REPO = Path(__file__).resolve().parent.parent
GOLDENS = REPO / "tests" / "data" / "goldens"
OUT = REPO / "tests" / "data" / "reference"


def reference(name: str, steps: int, top_k: int) -> dict[str, np.ndarray]:
    path = resolve_model(name)
    doc = json.loads((GOLDENS / f"greedy_{name}.json").read_text())
    t0 = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager")
    print(f"{name}: transformers loaded in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    ids, lps = [], []
    with torch.inference_mode():
        for i, case in enumerate(doc["cases"]):
            prompt, new = case["prompt_token_ids"], case["new_token_ids"][:steps]
            logits = model(torch.tensor([prompt + new[:-1]])).logits[0, len(prompt) - 1:].float()  # [steps, V]
            top = logits.log_softmax(-1).topk(top_k, dim=-1)
            ids.append(top.indices.to(torch.int32).numpy())
            lps.append(top.values.numpy())
            print(f"  [{i + 1}/{len(doc['cases'])}] {case['kind']}", file=sys.stderr, flush=True)
    return {"ids": np.stack(ids), "logprobs": np.stack(lps),  # [cases, steps, K]
            "gguf_sha256": np.array(doc["gguf_sha256"]), "transformers": np.array(transformers.__version__)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["smollm2-135m", "qwen2.5-coder-0.5b"])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=32)
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        data = reference(name, args.steps, args.top_k)
        np.savez_compressed(OUT / f"{name}.npz", **data)
        print(f"wrote {(OUT / f'{name}.npz').relative_to(REPO)} {data['ids'].shape}", file=sys.stderr)


if __name__ == "__main__":
    main()
