"""A BERT cross-encoder GGUF (pooling_type 4, llama.cpp's names: `cls` = the pooler dense, `cls.output` =
BertForSequenceClassification's classifier) on a tiny random file: each pair's relevance logit against
transformers' BertForSequenceClassification (f32, num_labels 1) on the same weights and the same
[CLS] query [SEP] document [SEP] with token types 0 then 1, which hearth's pair builder is checked to
give as transformers' BertTokenizerFast gives it. The reference without the pooler, or with every token
type 0 (what llama.cpp feeds), is far off: each is shown to matter. No real reranker GGUF is reachable
here (only the package index is), so tiny random files are the reference."""

from __future__ import annotations

import pytest
import torch

from hearth.backends import select
from hearth.engine.pairs import cut_pair, pair_prompt
from hearth.errors import UnsupportedError
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.tokenizer import Tokenizer
from hearth.models.encoder import scores
from hearth.models.registry import load_model
from tests.bert_factory import hf_bert_layers, hf_vocab, read_weights, write_tiny_encoder

import transformers  # noqa: E402
transformers.logging.set_verbosity_error()

PAIRS = [("the capital of france", "paris is the capital of france"), ("hello", "hello world"),
         ("search query", "an embedding model for documents"), ("it", "the document is 42 token s long")]
ATOL = 1e-4  # f32 logits of a 2-layer model: rounding only


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    path = tmp_path_factory.mktemp("rerank") / "tiny-rerank.gguf"
    dims = write_tiny_encoder(path, "bert", pooling_type=4)
    g = GGUFFile(path)
    model, cfg = load_model(g, select())
    return model, cfg, Tokenizer.from_gguf(g), read_weights(path), dims


def reference(w: dict, dims, ids, types, mask, drop: str = "") -> torch.Tensor:
    """transformers' BertForSequenceClassification (f32) on the file's weights -> logits [B].
    drop: "pooler" (the classifier on the [CLS] state, as a file without `cls` is scored), "types" (every
    token type 0)."""
    cfg = transformers.BertConfig(vocab_size=w["token_embd.weight"].shape[0], hidden_size=dims.hidden,
                                  num_hidden_layers=dims.layers, num_attention_heads=dims.heads,
                                  intermediate_size=dims.ffn, max_position_embeddings=dims.context,
                                  type_vocab_size=2, layer_norm_eps=dims.eps, hidden_act="gelu", num_labels=1,
                                  attn_implementation="eager")
    m = transformers.BertForSequenceClassification(cfg).float().eval()
    t = {k: torch.from_numpy(v) for k, v in w.items()}
    sd = {"bert.embeddings.word_embeddings.weight": t["token_embd.weight"],
          "bert.embeddings.position_embeddings.weight": t["position_embd.weight"],
          "bert.embeddings.token_type_embeddings.weight": t["token_types.weight"],
          "bert.embeddings.LayerNorm.weight": t["token_embd_norm.weight"],
          "bert.embeddings.LayerNorm.bias": t["token_embd_norm.bias"],
          "bert.pooler.dense.weight": t["cls.weight"], "bert.pooler.dense.bias": t["cls.bias"],
          "classifier.weight": t["cls.output.weight"], "classifier.bias": t["cls.output.bias"]}
    sd |= hf_bert_layers(t, dims.layers, "bert.")
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    if drop == "pooler":  # the pooler as the identity: classifier(CLS state)
        m.bert.pooler = None
    with torch.no_grad():
        types = torch.zeros_like(types) if drop == "types" else types
        if drop == "pooler":
            h = m.bert(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state[:, 0]
            return m.classifier(h)[:, 0]
        return m(input_ids=ids, attention_mask=mask, token_type_ids=types).logits[:, 0]


def hf_batch(pairs=PAIRS):
    """transformers' own encoding of the text pairs: input_ids, token_type_ids, attention_mask [B, L]."""
    tok = transformers.BertTokenizerFast(vocab={t: i for i, t in enumerate(hf_vocab())}, do_lower_case=True)
    enc = tok([q for q, _ in pairs], [d for _, d in pairs], padding=True, return_tensors="pt")
    return enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]


def hearth_batch(tokenizer, pairs=PAIRS):
    """hearth's pairs padded: ids [B, L], lengths [B], pair starts [B]."""
    built = [pair_prompt(tokenizer, q, d) for q, d in pairs]
    L = max(len(ids) for ids, _ in built)
    ids = torch.zeros(len(built), L, dtype=torch.long)
    for b, (row, _) in enumerate(built):
        ids[b, :len(row)] = torch.tensor(row)
    return ids, torch.tensor([len(r) for r, _ in built]), torch.tensor([s for _, s in built])


def test_pairs_are_encoded_as_transformers_encodes_a_text_pair(reranker):
    *_, tok, _, _ = reranker
    ids, lengths, starts = hearth_batch(tok)
    want_ids, want_types, mask = hf_batch()
    assert torch.equal(ids, want_ids) and torch.equal(lengths, mask.sum(1))
    pos = torch.arange(ids.shape[1])
    assert torch.equal(((pos >= starts[:, None]) & mask.bool()).long(), want_types)  # type 1: the document


def test_scores_match_bert_for_sequence_classification(reranker):
    model, cfg, tok, w, dims = reranker
    assert cfg.pooling == "rank" and model.head is not None
    ids, lengths, starts = hearth_batch(tok)
    want_ids, types, mask = hf_batch()
    with torch.inference_mode():
        got = scores(model(ids, lengths, starts), model.head)
    want = reference(w, dims, want_ids, types, mask)
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    assert want.std() > 0.1  # the pairs score apart: the match is not of constants


@pytest.mark.parametrize("drop", ["pooler", "types"])
def test_the_pooler_and_the_token_types_matter(reranker, drop):
    """Without either, the reference is far from hearth: the tight match above checks both."""
    model, _, tok, w, dims = reranker
    ids, lengths, starts = hearth_batch(tok)
    want_ids, types, mask = hf_batch()
    with torch.inference_mode():
        got = scores(model(ids, lengths, starts), model.head)
    assert (got - reference(w, dims, want_ids, types, mask, drop=drop)).abs().max() > 100 * ATOL


def test_batched_equals_alone(reranker):
    model, _, tok, *_ = reranker
    ids, lengths, starts = hearth_batch(tok)
    with torch.inference_mode():
        together = scores(model(ids, lengths, starts), model.head)
        for b, n in enumerate(lengths.tolist()):
            alone = scores(model(ids[b:b + 1, :n], lengths[b:b + 1], starts[b:b + 1]), model.head)
            torch.testing.assert_close(together[b], alone[0], rtol=0, atol=1e-5)


def test_a_head_without_the_pooler_scores_the_cls_state(tmp_path):
    """llama.cpp's converter drops BERT's pooler: such a file's score is cls.output over the [CLS] state."""
    path = tmp_path / "nopooler.gguf"
    dims = write_tiny_encoder(path, "bert", pooling_type=4, head=("cls.output",))
    model, _ = load_model(GGUFFile(path), select())
    tok = Tokenizer.from_gguf(GGUFFile(path))
    w = read_weights(path)
    ids, lengths, starts = hearth_batch(tok)
    with torch.inference_mode():
        h = model(ids, lengths, starts)
        got = scores(h, model.head)
    want = h[:, 0] @ torch.from_numpy(w["cls.output.weight"])[0] + torch.from_numpy(w["cls.output.bias"])[0]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert dims.head == ("cls.output",)


@pytest.mark.parametrize("head,words", [((), "no classification head"),
                                        (("cls", "cls.output", "cls.norm"), "cls.norm")])
def test_a_head_hearth_cannot_score_is_one_line(tmp_path, head, words):
    path = tmp_path / "bad.gguf"
    write_tiny_encoder(path, "bert", pooling_type=4, head=head)
    with pytest.raises(UnsupportedError, match=words):
        load_model(GGUFFile(path), select())


def test_a_cut_pair_keeps_the_query_and_the_closing_sep():
    ids, start = [101, 5, 6, 102, 7, 8, 9, 102], 4
    assert cut_pair(ids, start, 8, 1) == ids
    assert cut_pair(ids, start, 6, 1) == [101, 5, 6, 102, 7, 102]
    assert cut_pair(ids, start, 5, 1) is None  # no document token would be left


def test_a_bpe_pair_takes_the_files_sep_between_its_texts(tmp_path):
    """A RoBERTa cross-encoder's vocabulary (gpt2 BPE, add_bos, add_eos and add_sep, sep = eos = </s>): the
    pair is <s> q </s></s> d </s>, as llama-server's format_prompt_rerank builds it and transformers'
    RobertaTokenizer encodes a text pair; one text alone gets no sep."""
    import json

    from tests.loader.test_tokenizer import bpe_vocab, write_vocab_gguf

    tokens, types, merges, _ = bpe_vocab()
    tokens, types = tokens + ["<s>", "</s>", "<unk>", "<pad>"], types + [3, 3, 3, 3]  # CONTROL
    bos, eos, unk, pad = range(len(tokens) - 4, len(tokens))
    g = write_vocab_gguf(tmp_path / "roberta.gguf", "gpt2", tokens, types, pre="gpt-2", merges=merges,
                         bos_token_id=bos, eos_token_id=eos, sep_token_id=eos, unk_token_id=unk, pad_token_id=pad,
                         add_bos_token=True, add_eos_token=True, add_sep_token=True)
    tok = Tokenizer.from_gguf(g)
    (tmp_path / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    hf = transformers.RobertaTokenizer(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    for q, d in (("abc", "bad cab"), ("a b", "AB1 'e")):
        ids, start = pair_prompt(tok, q, d)
        assert ids == hf(q, d)["input_ids"], (q, d)
        assert ids[start - 2:start] == [eos, eos] and ids[0] == bos and ids[-1] == eos
        assert tok.encode(q).count(eos) == 1  # the sep is the pair's, not every text's
