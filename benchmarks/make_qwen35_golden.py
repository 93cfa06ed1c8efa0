"""Write llama.cpp's greedy continuations of the tiny qwen35 and qwen35moe GGUFs (tests/qwen35_factory.py) as a
golden for hearth's tests: tests/data/goldens/greedy_tiny_qwen35.json. Per file: its sha256 and, per prompt of
PROMPTS (token ids), llama.cpp's NEW greedy tokens (the prompt in one batch, then a token a decode, its recurrent
state carried by llama.cpp's own memory) and each step's top-1 margin (logit of the chosen token minus the next).

    .venv/bin/python -m tests.qwen35_factory /tmp/q35
    PYTHONPATH=<llama-cpp-python 0.3.36 sdist> LLAMA_CPP_LIB_PATH=<its built libllama.so's folder> \\
        .venv/bin/python benchmarks/make_qwen35_golden.py /tmp/q35

(llama-cpp-python's ctypes bindings over the libllama.so that setup_llama_mtmd.sh builds from the same sdist;
run from the repository root.)"""

from __future__ import annotations

import hashlib
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.modules.setdefault("diskcache", types.SimpleNamespace(Cache=object))  # the high-level Llama's, unused here

import llama_cpp as L  # noqa: E402

from tests.qwen35_factory import FILES, NEW, PROMPTS  # noqa: E402

OUT = ROOT / "tests" / "data" / "goldens" / "greedy_tiny_qwen35.json"


def decode(ctx, ids: list[int], start: int) -> None:
    batch = L.llama_batch_init(len(ids), 0, 1)
    for i, t in enumerate(ids):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, start + i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, i == len(ids) - 1
    batch.n_tokens = len(ids)
    if L.llama_decode(ctx, batch) != 0:
        raise SystemExit("llama_decode failed")
    L.llama_batch_free(batch)


def greedy(ctx, vocab_size: int, ids: list[int]) -> tuple[list[int], list[float]]:
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    decode(ctx, ids, 0)
    tokens, margins = [], []
    for step in range(NEW):
        row = L.llama_get_logits_ith(ctx, -1)
        logits = sorted(((row[j], j) for j in range(vocab_size)), reverse=True)
        tokens.append(logits[0][1])
        margins.append(round(logits[0][0] - logits[1][0], 5))
        decode(ctx, [tokens[-1]], len(ids) + step)
    return tokens, margins


def main() -> None:
    folder = Path(sys.argv[1])
    L.llama_backend_init()
    golden = {"llama_cpp": L.__version__}
    for arch, name in FILES.items():
        path = folder / name
        model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
        params = L.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = 256
        ctx = L.llama_init_from_model(model, params)
        n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
        cases = [dict(zip(("tokens", "margins"), greedy(ctx, n_vocab, ids))) for ids in PROMPTS]
        golden[arch] = {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "cases": cases}
        L.llama_free(ctx)
        L.llama_model_free(model)
    text = json.dumps(golden, indent=1)
    for arch in FILES:  # a case a line
        for case in golden[arch]["cases"]:
            text = text.replace(json.dumps(case, indent=1).replace("\n", "\n   "), json.dumps(case))
    OUT.write_text(text + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
