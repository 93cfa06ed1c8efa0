"""A reduced-vocabulary draft head (speculative_config.draft_vocab): the draft scores ids below N
plus the request's own tokens, as the full head would (a tiny random GGUF); the distribution a
sampled draft is drawn from is zero outside that set and sums to one; greedy output with it equals
plain greedy on a real model, with drafts proposed and accepted (by a draft also re-encoded at Q4_0,
speculative_config.draft_quant: the acceptance floor is the two's together); a value out of range is
one clear error naming the field."""

from __future__ import annotations

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.backends import select
from hearth.loader.gguf_loader import GGUFFile, head_tensor
from hearth.models.registry import load_model
from hearth.runner.draft_vocab import DraftVocab
from hearth.sample.sampler import target_probs
from hearth.spec_decode.config import DEFAULT_DRAFT_VOCAB, InvalidSpeculativeConfig, SpeculativeConfig

from tests.gguf_factory import SPECULATES, write_tiny_gguf
from tests.spec_decode.test_real_model import STORY, assert_greedy_equals_plain, chat, generate


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("dv") / "t.gguf"
    write_tiny_gguf(path, "qwen2", vocab=320, qtype="Q8_0")
    g = GGUFFile(path)
    model, cfg = load_model(g, select())
    return model, head_tensor(g)


def test_reduced_head_scores_the_first_ids_and_the_requests_own_tokens(tiny):
    model, head = tiny
    vocab = DraftVocab(head, 100, model.backend)
    vocab.see("a", [5, 250, 7, 250, 300])
    vocab.see("a", [301, 3])  # later tokens of the same request add rows
    hidden = torch.randn(2, head.shape[1])
    full = model.compute_logits(hidden).float()  # [2, 320]
    got = vocab.logits(hidden, ["a", "b"])
    assert got.shape == full.shape
    torch.testing.assert_close(got[:, :100], full[:, :100])  # the same kernel over the same rows
    mine = [250, 300, 301]
    # f32 over the dequantized rows, where the head's kernel rounds the activations to int8: close
    scale = float(full.abs().max())
    torch.testing.assert_close(got[0, mine], full[0, mine], rtol=0, atol=0.02 * scale)
    others = [i for i in range(100, 320) if i not in mine]
    assert torch.isinf(got[0, others]).all() and torch.isinf(got[1, 100:]).all()
    vocab.forget("a")
    assert torch.isinf(vocab.logits(hidden, ["a"])[0, mine]).all()


def test_special_tokens_are_scored_for_every_request(tiny):
    """keep (the vocabulary's special tokens): scored for a request that never held them, as the full
    head scores them; ids of the first `size` among them change nothing."""
    model, head = tiny
    vocab = DraftVocab(head, 100, model.backend, keep=[319, 5, 318, 319])
    assert vocab.kept == [318, 319]
    vocab.see("a", [250, 318])
    hidden = torch.randn(2, head.shape[1])
    full = model.compute_logits(hidden).float()  # [2, 320]
    got = vocab.logits(hidden, ["a", "b"])
    scale = float(full.abs().max())
    torch.testing.assert_close(got[:, [318, 319]], full[:, [318, 319]], rtol=0, atol=0.02 * scale)
    assert torch.isfinite(got[0, 250]) and torch.isinf(got[1, 250])  # the request's own ids stay its own
    assert torch.isfinite(got).sum(-1).tolist() == [103, 102]


@pytest.mark.usefixtures("native_speculation")
def test_the_llm_keeps_the_vocabularys_special_tokens_in_the_drafts_head(tmp_path):
    path = tmp_path / "t.gguf"
    write_tiny_gguf(path, "qwen2", vocab=320, qtype="Q8_0", **SPECULATES)  # native kernels: speculation on
    llm = LLM(str(path), progress=False, speculative_config={"method": "draft", "model": str(path), "draft_vocab": 100})
    assert llm.tokenizer.special_ids == [318, 319]  # the tiny vocabulary's BOS and EOS (CONTROL)
    assert llm.runner.drafter.vocab.kept == [318, 319]
    unset = LLM(str(path), progress=False, speculative_config={"method": "draft", "model": str(path)})
    assert unset.runner.drafter is not None and unset.runner.drafter.vocab is None  # 320 ids: the whole head


def test_past_many_special_tokens_only_the_end_of_generation_ones_are_kept(tiny, monkeypatch):
    """gemma3 marks 6,176 tokens special past 65,536 (mostly <unused*>): scoring them all each draft
    step is a dense matmul; past KEPT_SPECIAL_MAX only the end-of-generation tokens are kept."""
    from hearth import llm_draft

    model, head = tiny
    spec = SpeculativeConfig.parse({"method": "draft", "model": "x", "draft_vocab": 100})
    mc = type("MC", (), {"final_logit_softcap": None})()
    monkeypatch.setattr(llm_draft, "head_tensor", lambda _: head)  # the draft file's head
    g = None
    special = list(range(150, 320))
    few = llm_draft.draft_vocab(spec, g, mc, model.backend, special, {319})
    assert few.kept == special
    monkeypatch.setattr(llm_draft, "KEPT_SPECIAL_MAX", 64)
    many = llm_draft.draft_vocab(spec, g, mc, model.backend, special, {319})
    assert many.kept == [319]


@pytest.mark.usefixtures("native_speculation")
def test_an_unset_draft_vocab_reduces_a_larger_vocabularys_head(tmp_path):
    path = tmp_path / "t.gguf"
    write_tiny_gguf(path, "qwen2", vocab=DEFAULT_DRAFT_VOCAB + 64, qtype="Q8_0", hidden=32, heads=1, kv_heads=1,
                    head_dim=32, ffn=32)
    llm = LLM(str(path), progress=False, speculative_config={"method": "draft", "model": str(path)})
    vocab = llm.runner.drafter.vocab
    assert (vocab.size, vocab.kept) == (DEFAULT_DRAFT_VOCAB, [DEFAULT_DRAFT_VOCAB + 62, DEFAULT_DRAFT_VOCAB + 63])


def test_sampled_drafts_come_from_the_restricted_renormalized_distribution(tiny):
    model, head = tiny
    vocab = DraftVocab(head, 64, model.backend, keep=[319])
    vocab.see("a", [200])
    logits = vocab.logits(torch.randn(1, head.shape[1]), ["a"])
    q = target_probs(logits, [SamplingParams(temperature=0.8, top_p=0.95)])[0]  # [V]
    allowed = torch.zeros(320, dtype=torch.bool)
    allowed[:64] = allowed[200] = allowed[319] = True
    assert q[~allowed].sum() == 0 and abs(float(q.sum()) - 1) < 1e-5
    # the renormalized softmax over the kept ids: q's ratios there are the full head's
    # a small hidden state: a spread distribution (0.01-0.025 over the 66 kept ids), not one token's
    h = 0.02 * torch.randn(1, head.shape[1], generator=torch.Generator().manual_seed(0))
    t1 = [SamplingParams(temperature=1.0)]
    full = target_probs(model.compute_logits(h).float(), t1)[0]
    q0 = target_probs(vocab.logits(h, ["a"]), t1)[0]
    torch.testing.assert_close(q0[allowed], full[allowed] / full[allowed].sum(), rtol=0.02, atol=0)


@pytest.mark.parametrize("bad, why", [
    ({"draft_vocab": -1}, r"speculative_config\.draft_vocab must be 0 \(the whole vocabulary\) or more, got -1"),
    ({"draft_vocab": "32k"}, r"speculative_config\.draft_vocab must be int"),
])
def test_bad_draft_vocab_names_the_field(bad, why):
    with pytest.raises(InvalidSpeculativeConfig, match=why):
        SpeculativeConfig.parse({"method": "draft", "model": "x.gguf", **bad})


@pytest.mark.parametrize("asked, vocab, size", [
    (None, 151936, DEFAULT_DRAFT_VOCAB),  # unset: the measured default where the vocabulary is larger
    (None, 49152, 0),                     # ... and the whole head where it is not (SmolLM2)
    (0, 151936, 0), (32768, 151936, 32768), (151936, 151936, 0),
])
def test_draft_vocab_resolves_against_the_drafts_vocabulary(asked, vocab, size):
    given = {} if asked is None else {"draft_vocab": asked}
    spec = SpeculativeConfig.parse({"method": "draft", "model": "x.gguf", **given})
    spec.check_draft_vocab(vocab)
    assert spec.draft_vocab_for(vocab) == size
    assert spec.draft_vocab_for(vocab, default=0) == (size if asked else 0)  # a backend where it is not measured


def test_draft_vocab_is_for_method_draft_only():
    with pytest.raises(InvalidSpeculativeConfig, match=r'speculative_config\.draft_vocab applies to method "draft" only'):
        SpeculativeConfig.parse({"method": "ngram", "draft_vocab": 1000})


def test_draft_vocab_above_the_drafts_vocabulary_is_one_clear_error(tmp_path):
    target = tmp_path / "t.gguf"
    write_tiny_gguf(target, "qwen2", vocab=320)
    spec = {"method": "draft", "model": str(target), "draft_vocab": 321}
    with pytest.raises(InvalidSpeculativeConfig) as e:
        LLM(str(target), progress=False, speculative_config=spec)
    assert str(e.value) == ("speculative_config.draft_vocab (321) must be at most the draft model's "
                            "vocabulary size (320)")


@pytest.fixture(scope="module")
def reduced_draft(model_path):
    smol = str(model_path("smollm2-135m"))
    # reduced and re-encoded at Q4_0 (speculative_config.draft_quant; SmolLM2's file is Q4_1): both lossless
    spec = {"method": "draft", "model": smol, "num_speculative_tokens": 4, "cost_aware": False, "draft_vocab": 4096,
            "draft_quant": "q4_0"}
    return LLM(smol, progress=False, max_model_len=2048, speculative_config=spec)


@pytest.mark.parametrize("which", ["story", "code"])
def test_greedy_with_a_reduced_draft_vocabulary_equals_plain_greedy(smol_llm, reduced_draft, which, monkeypatch):
    # SmolLM2 drafting for itself: tokens outside the set (ids >= 4096 not in the prompt) fail, and its
    # Q4_0 weights' argmax differs from the file's now and then (~45% accepted on the story)
    drafter = reduced_draft.runner.drafter
    seen = _record_drafts(drafter, monkeypatch)
    assert_greedy_equals_plain(smol_llm, reduced_draft, which, min_drafted=40, min_rate=0.35)
    assert drafter.vocab is not None and drafter.vocab._qtype.name == "Q4_0"  # the head re-encoded
    # every draft is an id the reduced head scored (mapped back to the full vocabulary's ids), and
    # drafts past the first 4096 ids (the request's own, through its rows) were accepted too: the code
    # repeats its identifiers (3-5 such on each tier); the story may draft none (the avx2 tier's greedy text)
    assert all(t < 4096 or t in allowed for drafts, _, allowed in seen for t in drafts)
    assert which == "story" or any(t >= 4096 for _, accepted, _ in seen for t in accepted)


def _record_drafts(drafter, monkeypatch) -> list[tuple[list[int], list[int], set[int]]]:
    """Each verified chain as (drafts, the drafts accepted, the ids past the reduced head's first
    rows that its request's head scored)."""
    seen, observe = [], drafter.observe

    def spy(out):
        for rid, (_, d) in drafter._last.items():
            got = [t.token_id for t in out.accepted.get(rid, [])]
            n = next((j for j, (a, b) in enumerate(zip(d, got)) if a != b), min(len(d), len(got)))
            seen.append((d, d[:n], drafter.vocab._extra.get(rid, ([], set()))[1] | set(drafter.vocab.kept)))
        observe(out)
    monkeypatch.setattr(drafter, "observe", spy)
    return seen


def test_sampling_with_a_reduced_draft_vocabulary_is_reproducible(smol_llm, reduced_draft):
    prompt = chat(smol_llm, STORY)
    p = SamplingParams(temperature=0.7, seed=11, max_tokens=40, ignore_eos=True)
    a, drafted, accepted = generate(reduced_draft, prompt, p)
    b, _, _ = generate(reduced_draft, prompt, p)
    assert a.token_ids == b.token_ids and drafted >= 20 and accepted > 0, (drafted, accepted)
