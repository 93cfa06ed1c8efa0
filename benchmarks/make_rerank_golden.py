"""Write llama.cpp's rerank scores for the tiny Qwen3-Reranker GGUF (tests/qwen3_reranker.py) as a golden
for hearth's tests: tests/data/goldens/rerank_tiny_qwen3.json. Each case is a document of DOCS against QUERY:
the prompt llama-server's format_prompt_rerank builds (the file's rerank template, "{query}" then
"{document}" replaced, tokenized with special tokens parsed and no BOS) and llama.cpp's score for it (a
context with pooling_type RANK: its embedding's first value, the softmax's p("yes"), what llama-server answers).

    .venv/bin/python -m tests.qwen3_reranker /tmp/tiny-qwen3-rerank.gguf
    /work/llamacpp-venv/bin/python benchmarks/make_rerank_golden.py /tmp/tiny-qwen3-rerank.gguf

(the llama.cpp venv of setup_llamacpp.sh; run from the repository root.)"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import llama_cpp as L  # noqa: E402

from tests.qwen3_reranker import DOCS, QUERY, TEMPLATE  # noqa: E402

OUT = ROOT / "tests" / "data" / "goldens" / "rerank_tiny_qwen3.json"


def tokenize(vocab, text: str) -> list[int]:
    raw = text.encode()
    buf = (L.llama_token * (len(raw) + 8))()
    n = L.llama_tokenize(vocab, raw, len(raw), buf, len(buf), False, True)  # add_special no, parse_special yes
    return list(buf[:n])


def score(ctx, ids: list[int]) -> list[float]:
    """The pair's pooled output: [p(yes), p(no)]."""
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    batch = L.llama_batch_init(len(ids), 0, 1)
    for i, t in enumerate(ids):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, i == len(ids) - 1
    batch.n_tokens = len(ids)
    if L.llama_decode(ctx, batch) != 0:
        raise SystemExit("llama_decode failed")
    out = L.llama_get_embeddings_seq(ctx, 0)
    L.llama_batch_free(batch)
    return [out[0], out[1]]


def main() -> None:
    path = Path(sys.argv[1])
    L.llama_backend_init()
    model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
    params = L.llama_context_default_params()
    params.embeddings, params.pooling_type = True, L.LLAMA_POOLING_TYPE_RANK
    params.n_ctx = params.n_batch = params.n_ubatch = 256
    ctx = L.llama_init_from_model(model, params)
    vocab = L.llama_model_get_vocab(model)
    cases = []
    for doc in DOCS:
        ids = tokenize(vocab, TEMPLATE.replace("{query}", QUERY).replace("{document}", doc))
        p_yes, p_no = score(ctx, ids)
        cases.append({"query": QUERY, "document": doc, "ids": ids, "p_yes": p_yes, "p_no": p_no})
    head = {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "llama_cpp": L.__version__}
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    OUT.write_text("{\n" + "\n".join(lines) + '\n "cases": [\n  ' + ",\n  ".join(map(json.dumps, cases))
                   + "\n ]\n}\n")  # a case a line
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
