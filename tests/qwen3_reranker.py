"""A tiny Qwen3-Reranker GGUF as llama.cpp's converter writes one (tests/gguf_factory.py: qwen3 with
pooling_type 4, `cls.output.weight` the head's YES and NO rows, labels ["yes", "no"], a rerank template), and
its reference scores, computed without hearth: transformers' Qwen3ForCausalLM on the same file, the prompt's
last-token logits of YES and NO through a softmax (llama-server's score: p(YES)) and their difference.
llama.cpp's own scores for it: tests/data/goldens/rerank_tiny_qwen3.json (benchmarks/make_rerank_golden.py).

`python -m tests.qwen3_reranker OUT.gguf` writes the file. The constants import without torch (the golden's
script reads them in llama.cpp's venv)."""

from __future__ import annotations

import sys
from pathlib import Path

TEMPLATE = "<|begin_of_text|>judge: {query} | {document}<|end_of_text|>\n"
"""Qwen3-Reranker's shape (a special token, the query, the document, a special token, the text the answer
follows) in the tiny vocabulary's special tokens."""
YES, NO = 50, 60
"""The head's rows the tiny file's labels are: chosen so that DOCS' scores spread over (0, 1), where a
wrong softmax or a wrong row shows."""
QUERY = "the capital of france"
DOCS = ["paris is the capital of france", "hello world", "the word was out", "café {query}", "they had one"]


def write_reranker(path: Path, template: str | None = TEMPLATE):
    """-> the file's TinyDims."""
    from tests.gguf_factory import write_tiny_gguf

    return write_tiny_gguf(path, "qwen3", pooling_type=4, rank_rows=(YES, NO), rerank_template=template)


def reference(path: Path, dims, prompts: list[list[int]]) -> list[tuple[float, float]]:
    """(p(YES), l(YES) - l(NO)) of each prompt's last token, each prompt alone through transformers."""
    import torch

    from tests.hf_built import hf_model

    model = hf_model(path, "qwen3", dims)
    out = []
    with torch.no_grad():
        for ids in prompts:
            logits = model(torch.tensor([ids])).logits[0, -1, [YES, NO]]  # [2]
            out.append((torch.softmax(logits, -1)[0].item(), (logits[0] - logits[1]).item()))
    return out


if __name__ == "__main__":
    write_reranker(Path(sys.argv[1]))
