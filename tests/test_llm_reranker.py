"""LLM.score over a tiny reranker GGUF (vLLM's llm.score shape): each pair's score is the model's own
logit for the pair alone, through a sigmoid (use_activation False: the logit), whatever batch it ran in;
1:N and N:N pairing; a pair past the context is an error naming both numbers unless
truncate_prompt_tokens cuts its document; embed() on a reranker and score() on an embedder are one line."""

from __future__ import annotations

import math

import pytest
import torch

from hearth.engine.encoder_core import EmbeddingOnlyError
from hearth.engine.pairs import pair_prompt
from hearth.errors import HearthError
from hearth.llm import LLM
from hearth.models.encoder import scores
from tests.bert_factory import write_tiny_encoder

QUERY = "the capital of france"
DOCS = ["paris is the capital of france", "hello world", "an embedding model", "it is 42", "café"]


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = tmp_path_factory.mktemp("rerank") / "tiny-rerank.gguf"
    write_tiny_encoder(path, "bert", pooling_type=4)
    out = LLM(str(path), max_num_seqs=2, max_num_batched_tokens=40, progress=False)
    yield out
    out.close()


def alone(llm: LLM, a: str, b: str) -> float:
    ids, start = pair_prompt(llm.tokenizer, a, b)
    with torch.inference_mode():
        h = llm.model(torch.tensor([ids]), torch.tensor([len(ids)]), torch.tensor([start]))
        return scores(h, llm.model.head)[0].item()


def test_score_is_each_pair_alone_through_a_sigmoid(llm):
    assert llm.reranker
    out = llm.score(QUERY, DOCS)  # 5 pairs, 2 per batch
    logits = [alone(llm, QUERY, d) for d in DOCS]
    assert [o.outputs.score for o in out] == pytest.approx([1 / (1 + math.exp(-x)) for x in logits], abs=1e-5)
    raw = llm.score(QUERY, DOCS, use_activation=False)
    assert [o.outputs.score for o in raw] == pytest.approx(logits, abs=1e-5)
    assert out[0].prompt_token_ids == pair_prompt(llm.tokenizer, QUERY, DOCS[0])[0]
    zipped = llm.score(DOCS[:2], DOCS[2:4], use_activation=False)  # N:N
    assert [o.outputs.score for o in zipped] == pytest.approx([alone(llm, DOCS[0], DOCS[2]),
                                                               alone(llm, DOCS[1], DOCS[3])], abs=1e-5)
    with pytest.raises(ValueError, match="text_1 has 2 texts and text_2 3"):
        llm.score(DOCS[:2], DOCS[:3])


def test_a_pair_past_the_context(llm):
    long_doc = " ".join(["paris"] * 80)  # the tiny context is 64 tokens
    with pytest.raises(ValueError, match=r"pair 1: the pair with its query is 87 tokens, more than the context holds"):
        llm.score(QUERY, ["paris", long_doc])  # the pair is named, as the API names its document
    for bad in (0, 65, True):  # True is no 1 (a bool is an int to Python)
        with pytest.raises(ValueError, match=r"truncate_prompt_tokens: must be -1 or 1 to 64"):
            llm.score(QUERY, long_doc, truncate_prompt_tokens=bad)
    (cut,) = llm.score(QUERY, long_doc, truncate_prompt_tokens=-1, use_activation=False)
    ids = cut.prompt_token_ids
    assert len(ids) == 64 and ids[-1] == 102 and ids[:6] == pair_prompt(llm.tokenizer, QUERY, "x")[0][:6]
    assert cut.outputs.score == pytest.approx(alone(llm, QUERY, " ".join(["paris"] * (64 - 7))), abs=1e-5)


def test_embed_on_a_reranker_and_score_on_an_embedder_are_one_line(llm, tmp_path):
    with pytest.raises(EmbeddingOnlyError, match=r"is a reranker: it scores query-document pairs"):
        llm.embed("hello")
    path = tmp_path / "embedder.gguf"
    write_tiny_encoder(path, "bert")
    embedder = LLM(str(path), progress=False)
    with pytest.raises(HearthError, match=r"LLM.score: this model \(bert\) is not a reranker"):
        embedder.score("a", "b")
    embedder.close()


def test_hearth_run_refuses_a_reranker(llm, capsys):
    from hearth.cli import main as cli_main

    assert cli_main(["run", str(llm.path), "hello"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "is a reranker" in err and "POST /v1/rerank" in err and "Traceback" not in err, err


def test_a_decoder_reranker_without_a_rank_head_is_refused_at_load(tmp_path):
    """llama.cpp builds cls.output for qwen3 and qwen3vl alone: another decoder's pooling_type 4 names those hearth reranks
    with (a qwen3 one: tests/test_llm_rerank_decoder.py)."""
    from hearth.errors import UnsupportedError
    from tests.gguf_factory import write_tiny_gguf

    path = tmp_path / "tiny-llama-rerank.gguf"
    write_tiny_gguf(path, "llama", pooling_type=4)
    with pytest.raises(UnsupportedError, match=r"a decoder reranker \(llama with pooling_type 4, rank\) is not "
                                               r"supported; hearth reranks with qwen3, qwen3vl decoders"):
        LLM(str(path), progress=False)
