"""LLM.score over a tiny Qwen3-Reranker GGUF (tests/qwen3_reranker.py): each pair's score is llama.cpp's, the
softmax of the yes and no logits of its prompt's last token, p(yes), against transformers on the same file and
prompt and against llama.cpp's own (a golden); the prompt is the file's rerank template as llama-server fills
and tokenizes it (without one: the two texts as llama-server joins them); a cut keeps the template's end; text
and embeddings from it are one line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from hearth.engine.encoder_core import EmbeddingOnlyError
from hearth.engine.engine_core import InvalidPromptError
from hearth.engine.pairs import pair_prompts
from hearth.engine.rerank_template import template_text
from hearth.llm import LLM
from tests.qwen3_reranker import DOCS, QUERY, TEMPLATE, reference, write_reranker

GOLDEN = Path(__file__).parent / "data" / "goldens" / "rerank_tiny_qwen3.json"
"""llama.cpp's prompts and scores for the tiny file (benchmarks/make_rerank_golden.py)."""
P_ATOL = 2e-3  # p(yes); hearth's CPU kernels vs transformers' f32 (measured: <= 6e-4), vs llama.cpp (<= 1.1e-3)
LOGIT_ATOL = 2e-2  # l(yes) - l(no) (measured: <= 4e-3)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(with the rerank template, without one): the same weights (one seed), so one reference model."""
    d = tmp_path_factory.mktemp("qwen3-rerank")
    dims = write_reranker(d / "tiny-qwen3-rerank.gguf")
    write_reranker(d / "tiny-qwen3-rerank-plain.gguf", template=None)
    return d / "tiny-qwen3-rerank.gguf", d / "tiny-qwen3-rerank-plain.gguf", dims


@pytest.fixture(scope="module")
def llm(files):
    out = LLM(str(files[0]), max_num_seqs=2, max_num_batched_tokens=64, progress=False)  # 5 pairs: 3 steps
    yield out
    out.close()


def test_each_score_is_the_softmax_of_yes_and_no_at_the_last_token(llm, files):
    out = llm.score(QUERY, DOCS)
    raw = llm.score(QUERY, DOCS, use_activation=False)  # again: the pairs' prefixes come from the cache
    ref = reference(files[0], files[2], [o.prompt_token_ids for o in out])
    assert llm.reranker and not llm.embeds_only
    assert [o.outputs.score for o in out] == pytest.approx([p for p, _ in ref], abs=P_ATOL)
    assert [o.outputs.score for o in raw] == pytest.approx([x for _, x in ref], abs=LOGIT_ATOL)
    scores = sorted(p for p, _ in ref)  # spread over (0, 1): a wrong label, row or pooling cannot pass
    assert scores[0] < 0.05 and scores[-1] > 0.95 and any(0.2 < p < 0.8 for p in scores), scores


def test_prompts_and_scores_are_llamacpps(llm):
    """llama-server's prompt for each pair (its tokenizer's ids) and llama.cpp's score, p(yes), on this very file."""
    golden = json.loads(GOLDEN.read_text())
    assert hashlib.sha256(llm.path.read_bytes()).hexdigest() == golden["sha256"], \
        "the tiny reranker's file changed: write the golden again (benchmarks/make_rerank_golden.py)"
    cases = golden["cases"]
    out = llm.score(QUERY, [c["document"] for c in cases])
    assert [o.prompt_token_ids for o in out] == [c["ids"] for c in cases]
    assert [o.outputs.score for o in out] == pytest.approx([c["p_yes"] for c in cases], abs=P_ATOL)


def test_the_prompt_is_the_rerank_template_as_llama_server_fills_it(llm):
    (out,) = llm.score(QUERY, DOCS[3])  # "café {query}": a document's braces stay its text
    text = template_text(TEMPLATE, QUERY, DOCS[3])
    assert text == "<|begin_of_text|>judge: the capital of france | café {query}<|end_of_text|>\n"
    tok = llm.tokenizer
    # the whole text tokenized, its special tokens parsed, no BOS added (format_prompt_rerank's)
    assert out.prompt_token_ids == tok.encode(text, add_special_tokens=False, parse_special=True)
    assert out.prompt_token_ids.count(tok.bos_id) == 1 and out.prompt_token_ids[0] == tok.bos_id
    assert out.prompt_token_ids[-2:] == [tok.eos_id, *tok.encode("\n", add_special_tokens=False)]


def test_the_places_are_filled_in_one_pass():
    """A text's own braces stay text: llama-server would put the document in a query's "{document}" too."""
    assert template_text("<{query}|{document}>", "q {document}", "d {query}") == "<q {document}|d {query}>"
    assert template_text("{query}{query} {document}", "q", "d") == "qq d"  # every place, as llama-server


def test_without_a_template_the_texts_are_joined_as_llama_server_joins_them(files):
    """No rerank template: llama-server's [BOS] query [EOS] [SEP] document [EOS], each only where the vocabulary
    adds it: a Qwen vocabulary adds none, so the query's tokens then the document's."""
    plain = LLM(str(files[1]), progress=False)
    try:
        tok = plain.tokenizer
        assert tok.rerank_template is None and not (tok.add_bos or tok.add_eos or tok.add_sep or tok.pair_sep)
        out = plain.score(QUERY, DOCS[:2])
        for o, d in zip(out, DOCS):
            assert o.prompt_token_ids == tok.encode(QUERY, False, False) + tok.encode(d, False, False)
        ref = reference(files[0], files[2], [o.prompt_token_ids for o in out])
        assert [o.outputs.score for o in out] == pytest.approx([p for p, _ in ref], abs=P_ATOL)
    finally:
        plain.close()


def test_a_cut_pair_keeps_the_query_and_the_templates_end(llm):
    tok = llm.tokenizer
    end = [tok.eos_id, *tok.encode("\n", add_special_tokens=False)]
    long_doc = " ".join(["paris"] * 300)  # the tiny context is 256 tokens
    with pytest.raises(ValueError, match=r"pair 0: the pair with its query is \d+ tokens, more than the context "
                                         r"holds for one \(255\)"):  # a decoder computes one token past it
        llm.score(QUERY, long_doc)
    (cut,) = llm.score(QUERY, long_doc, truncate_prompt_tokens=40)
    ids = cut.prompt_token_ids
    head = tok.encode(template_text(TEMPLATE, QUERY, "paris"), add_special_tokens=False)[:-3]  # up to the document
    assert len(ids) <= 40 and ids[:len(head)] == head and ids[-2:] == end
    # Cohere's max_tokens_per_doc: the document's first 3 tokens, the template whole around them
    (five,), _ = pair_prompts(tok, [(QUERY, "paris is the capital of france")], None, 255, second_tokens=3)
    three = tok.decode(tok.encode("paris is the capital of france", False)[:3])
    assert five == tok.encode(template_text(TEMPLATE, QUERY, three), add_special_tokens=False)
    n = len(tok.encode(template_text(TEMPLATE, QUERY, ""), add_special_tokens=False))  # "| " + "paris": " paris"
    with pytest.raises(ValueError, match=rf"pair 0: the rerank template with its query takes {n} tokens, which "
                                         rf"leaves no document token within {n - 1}"):
        llm.score(QUERY, "paris", truncate_prompt_tokens=n - 1)


def test_text_and_embeddings_from_a_decoder_reranker_are_one_line(llm, capsys):
    with pytest.raises(InvalidPromptError, match=r"this model is a reranker: it scores query-document pairs"):
        llm.generate("the capital of france is")
    with pytest.raises(EmbeddingOnlyError, match=r"is a reranker"):
        llm.embed("hello")
    from hearth.cli import main as cli_main

    assert cli_main(["run", str(llm.path), "hello"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "is a reranker" in err and "POST /v1/rerank" in err and "Traceback" not in err, err
