"""Qwen3.5's MTP head (hearth.models.mtp_head) on a tiny file with the block the converter writes
(tests/qwen35_factory.py hf_mtp): its logits equal a plain torch reference written from the definition over the checkpoint's mtp.* tensors
(each broken variant of that reference, concat swapped or a norm dropped, is far off: the comparison sees them);
drafting with it recursively follows the reference's recursion; a file without the block refuses method mtp with one
line. Method mtp in the engine (hearth.runner.mtp_drafter): greedy with its drafts is plain greedy, its K/V in the
target's blocks, and with drafts accepted and rejected its K/V at every committed position are the ones a single pass
over the target's rows writes."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from hearth import LLM, SamplingParams
from hearth.backends import select
from hearth.errors import UnsupportedError
from hearth.layers.linear import use_linear_policy
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.mtp_head import NoMtpLayer, mtp_head
from hearth.models.registry import load_model
from hearth.runner.mtp_drafter import MtpDrafter
from tests.models.test_logits_vs_transformers import REL_TOL, prompt, rel_err
from tests.qwen35_factory import DIMS, hf_mtp, hf_qwen35, write_qwen35_gguf

FAR = 0.05  # a broken reference is at least this far off (measured rel_err: 0.17 to 1.3)
BLOCK = 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(transformers' trunk, the mtp.* tensors, path with the MTP block, path without, hearth's exact trunk, head)."""
    hf, mtp = hf_qwen35(), hf_mtp()
    d = tmp_path_factory.mktemp("qwen35mtp")
    path = write_qwen35_gguf(d / "tiny-qwen35-mtp.gguf", hf, mtp=mtp)
    plain = write_qwen35_gguf(d / "tiny-qwen35.gguf", hf)
    g = GGUFFile(path)
    with use_linear_policy(exact=True):
        model, cfg = load_model(g, select())
        head = mtp_head(model, g)
    return hf, mtp, path, plain, model, head


def _rms(x: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """Qwen3.5's zero-centred RMSNorm (the checkpoint's weight + 1); w None: the norm dropped."""
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + DIMS.rms_eps)
    return x if w is None else x * (1 + w)


def _rope(x: torch.Tensor, positions: torch.Tensor, rot: int = 8) -> torch.Tensor:
    """Neox rope over each head's first `rot` dims (partial_rotary_factor 0.25; text: every M-RoPE section alike)."""
    inv = 1.0 / DIMS.rope_theta ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot)
    ang = positions[:, None].float() * inv  # [T, rot / 2]
    cos, sin = ang.cos()[:, None], ang.sin()[:, None]
    a, b, rest = x[..., :rot // 2], x[..., rot // 2:rot], x[..., rot:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], dim=-1)


def reference(mtp: dict, embed: torch.Tensor, ids: torch.Tensor, h: torch.Tensor, positions: torch.Tensor,
              broken: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """The definition, one sequence: ids [T] (t at p+1), h [T, hidden] (h_p)
    -> (h_{p+1} [T, hidden], logits [T, vocab]).
    broken: "swap" (concat hidden first), "enorm" / "hnorm" / "head_norm" (that norm dropped)."""
    w = {k.removeprefix("mtp.").removesuffix(".weight"): v for k, v in mtp.items()}
    L, d = "layers.0.", DIMS
    e = _rms(embed[ids], None if broken == "enorm" else w["pre_fc_norm_embedding"])
    hn = _rms(h, None if broken == "hnorm" else w["pre_fc_norm_hidden"])
    x = torch.cat([hn, e] if broken == "swap" else [e, hn], dim=-1) @ w["fc"].T  # [T, hidden]
    T = len(ids)
    a = _rms(x, w[L + "input_layernorm"])
    qg = (a @ w[L + "self_attn.q_proj"].T).view(T, d.heads, 2 * d.head_dim)  # per head [query | gate]
    q, gate = qg[..., :d.head_dim], qg[..., d.head_dim:].reshape(T, -1)
    k = (a @ w[L + "self_attn.k_proj"].T).view(T, d.kv_heads, d.head_dim)
    v = (a @ w[L + "self_attn.v_proj"].T).view(T, d.kv_heads, d.head_dim)
    q = _rope(_rms(q, w[L + "self_attn.q_norm"]), positions)
    k = _rope(_rms(k, w[L + "self_attn.k_norm"]), positions)
    rep = d.heads // d.kv_heads  # head j reads kv head j // rep (transformers' repeat_kv)
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True)
    o = o.transpose(0, 1).reshape(T, -1) * gate.sigmoid()
    x = x + o @ w[L + "self_attn.o_proj"].T
    m = _rms(x, w[L + "post_attention_layernorm"])
    x = x + (F.silu(m @ w[L + "mlp.gate_proj"].T) * (m @ w[L + "mlp.up_proj"].T)) @ w[L + "mlp.down_proj"].T
    out = _rms(x, None if broken == "head_norm" else w["norm"])
    return out, out @ embed.T  # tied head


def run_head(head, ids: list[int], h: torch.Tensor, positions: list[int], kv: torch.Tensor, table: list[int],
             seq_len: int) -> torch.Tensor:
    """The head over rows at `positions` of one sequence whose cache holds seq_len positions -> its hidden rows."""
    slots = [table[p // BLOCK] * BLOCK + p % BLOCK for p in positions]
    meta = head.backend.metadata([0, len(ids)], [seq_len], [table], slots, BLOCK)
    with torch.no_grad():
        return head(torch.tensor(ids), h, torch.tensor(positions), meta, kv)


def _inputs(hf, n: int = 12):
    """ids [n] and the trunk's h rows paired as the head reads them: row j = (t_j, h_{j-1}), row 0's h zeros (as
    llama.cpp's first pending row), at positions 0..n-1."""
    ids = torch.tensor(prompt(DIMS.vocab, n=n))
    with torch.no_grad():
        trunk = hf.model(ids[None]).last_hidden_state[0]  # [n, hidden], after the final norm (llama.cpp's h_nextn)
    return ids, torch.cat([torch.zeros(1, DIMS.hidden), trunk[:-1]])


def test_the_trunk_leaves_the_mtp_block_out(tiny):
    _, _, path, _, model, _ = tiny
    assert model.cfg.num_layers == DIMS.layers and len(model.cfg.recurrent_layers) == DIMS.layers
    assert GGUFFile(path).arch_get("block_count") == DIMS.layers + 1


def test_head_logits_equal_the_definition(tiny):
    hf, mtp, _, _, _, head = tiny
    ids, h = _inputs(hf)
    kv = torch.zeros(2, 8, BLOCK, DIMS.kv_heads, DIMS.head_dim)
    table = [5, 2, 7]  # scrambled pages
    ours = head.compute_logits(run_head(head, ids.tolist(), h, list(range(len(ids))), kv, table, len(ids)))
    embed = hf.model.embed_tokens.weight.detach()
    ref = reference(mtp, embed, ids, h, torch.arange(len(ids)))[1]
    assert rel_err(ours, ref) < REL_TOL
    for broken in ("swap", "enorm", "hnorm", "head_norm"):  # the comparison tells each apart
        assert rel_err(ours, reference(mtp, embed, ids, h, torch.arange(len(ids)), broken)[1]) > FAR, broken


def test_drafting_recursively_on_its_own_hidden_row(tiny):
    """A prefill of the head's rows, then K drafts each from the last draft's token and the head's own output row
    (llama.cpp's single-head recursion), one position a step, over its paged K/V: the reference's recursion."""
    hf, mtp, _, _, _, head = tiny
    ids, h = _inputs(hf, n=9)
    kv = torch.zeros(2, 8, BLOCK, DIMS.kv_heads, DIMS.head_dim)
    table = [3, 6, 1, 4]
    embed = hf.model.embed_tokens.weight.detach()
    row, n = run_head(head, ids.tolist(), h, list(range(len(ids))), kv, table, len(ids))[-1:], len(ids)
    seq_ids, seq_h = ids, h
    ref_row = reference(mtp, embed, seq_ids, seq_h, torch.arange(n))[0][-1:]
    for _ in range(3):
        t = int(head.compute_logits(row).argmax())
        row = run_head(head, [t], row, [n], kv, table, n + 1)  # [1, hidden]: the next draft's h
        seq_ids, seq_h = torch.cat([seq_ids, torch.tensor([t])]), torch.cat([seq_h, ref_row])
        n += 1
        ref_row = reference(mtp, embed, seq_ids, seq_h, torch.arange(n))[0][-1:]
        assert rel_err(row, ref_row) < REL_TOL


def test_no_mtp_layer_is_one_line(tiny):
    _, _, _, plain, _, _ = tiny
    with pytest.raises(NoMtpLayer, match="has no MTP layer.*convert it with.*ngram or suffix, or a draft model"):
        LLM(str(plain), speculative_config={"method": "mtp", "num_speculative_tokens": 2})


def test_another_architectures_mtp_layer_is_one_line(tiny, monkeypatch):
    _, _, path, _, _, _ = tiny
    monkeypatch.setattr("hearth.models.mtp_head.MTP_ARCHS", ())
    with pytest.raises(NoMtpLayer, match="drafting with qwen35's MTP layer is not supported"):
        LLM(str(path), speculative_config={"method": "mtp"})


GREEDY = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
MTP = {"method": "mtp", "num_speculative_tokens": 3, "cost_aware": False}


@pytest.fixture(scope="module")
def q8(tmp_path_factory):
    """The tiny qwen35 with its MTP block, Q8_0 matrices (the native kernels' linears: verify rows as decode rows)."""
    return write_qwen35_gguf(tmp_path_factory.mktemp("qwen35mtpq8") / "tiny-qwen35-mtp-q8.gguf", hf_qwen35(),
                             qtype="Q8_0", mtp=hf_mtp())


@pytest.fixture(scope="module")
def prompts():
    return [prompt(DIMS.vocab, n=n, seed=s) for n, s in ((8, 5), (13, 6))]


@pytest.fixture(scope="module")
def plain(q8, prompts):
    return _generate(LLM(str(q8), progress=False), prompts)


def _generate(llm: LLM, prompts) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY)]


def _mtp(q8) -> LLM:
    llm = LLM(str(q8), progress=False, speculative_config=MTP)
    assert not llm.speculation_off, llm.speculation_off
    assert isinstance(llm.runner.drafter, MtpDrafter)
    return llm


@pytest.mark.usefixtures("native_speculation")
def test_mtp_drafts_are_lossless(q8, prompts, plain):
    llm = _mtp(q8)
    assert _generate(llm, prompts) == plain
    assert llm.engine.spec.stats.num_draft_tokens > 0  # the head drafted: the equality is not vacuous
    # its K/V live in the target's blocks (same ids, same tables): the block manager's accounting is theirs too
    target = next(c for c, r in zip(llm.runner.kv_caches, llm.model_config.recurrent_layers) if not r)
    assert llm.runner.drafter.kv_cache.shape == target.shape
    assert llm.engine.scheduler.kv.num_used_blocks == 0 and not llm.runner.drafter.states


class _Oracle:
    """Wraps an MtpDrafter: its drafts replaced by the plain run's next tokens (every other step the last one made
    wrong), so drafts are accepted and rejected; records the target's row at each position (the last computed
    there: a rejected draft's is computed again as the next token) and the request's block table."""

    def __init__(self, drafter: MtpDrafter, text: list[int], monkeypatch):
        self.d, self.text, self.rows, self.table, self.steps, self.final = drafter, text, {}, [], 0, None
        draft, see, forget = drafter.draft, drafter.see_hidden, drafter.forget

        def oracle_draft(so, generator):
            filled = draft(so, generator)
            seqs = []
            for s in filled.seqs:
                self.table = s.block_ids
                if s.spec_token_ids:
                    self.steps += 1
                    k, p = len(s.spec_token_ids), s.start_pos + 1
                    d = list(self.text[p:p + k])
                    if self.steps % 2 and d:
                        d[-1] = (d[-1] + 1) % DIMS.vocab
                    s = replace(s, spec_token_ids=d)
                seqs.append(s)
            return replace(filled, seqs=seqs)

        def record(seqs, hidden, qsl):
            for s, a in zip(seqs, qsl):
                for j in range(len(s.token_ids) + len(s.spec_token_ids)):
                    self.rows[s.start_pos + j] = hidden[a + j].float().clone()
            see(seqs, hidden, qsl)

        def final(rid):
            if rid in drafter.states:
                self.final = drafter.states[rid]
            forget(rid)

        monkeypatch.setattr(drafter, "draft", oracle_draft)
        monkeypatch.setattr(drafter, "see_hidden", record)
        monkeypatch.setattr(drafter, "forget", final)


@pytest.mark.usefixtures("native_speculation")
def test_accepted_drafts_are_recomputed_from_the_targets_rows(q8, prompts, plain, monkeypatch):
    """Drafts accepted and rejected (an oracle's): the text is plain greedy's, and the head's K/V at every committed
    position it holds are the ones a single pass over (token, the target's row before) writes: the rows it computed
    from its own hidden states (accepted drafts) and the rejected positions' are overwritten, none is left."""
    llm = _mtp(q8)
    text = prompts[0] + plain[0]
    oracle = _Oracle(llm.runner.drafter, text, monkeypatch)
    assert _generate(llm, prompts[:1]) == plain[:1]
    drafted, accepted = llm.engine.spec.stats.num_draft_tokens, llm.engine.spec.stats.num_accepted_tokens
    assert 0 < accepted < drafted
    st, head, n = oracle.final, llm.runner.drafter.head, oracle.final.valid
    assert n > len(prompts[0]) + 8
    # the reference: the head over positions 0..n-1 in one pass, into a cache of its own (same block table)
    ref = MtpDrafter(head, llm.model_config, llm.runner.drafter.kv_cache.shape[1], llm.config.block_size)
    h = torch.stack([torch.zeros(DIMS.hidden)] + [oracle.rows[p] for p in range(n - 1)])
    ref._forward([(0, text[:n], h, oracle.table)])
    bs = llm.config.block_size
    slots = torch.tensor([oracle.table[p // bs] * bs + p % bs for p in range(n)])
    ours, theirs = (c.flatten(1, 2)[:, slots].float() for c in (llm.runner.drafter.kv_cache, ref.kv_cache))
    assert (ours - theirs).abs().max() < 0.02 * theirs.abs().max()


@pytest.mark.usefixtures("native_speculation")
def test_a_prefix_hit_and_sampling_with_mtp_drafts(q8, prompts, plain):
    """The same prompts again hit the prefix cache (the head starts past position 0): still plain greedy; seeded
    sampling with its drafts (drawn from its q, verified by rejection sampling) repeats itself."""
    llm = _mtp(q8)
    assert _generate(llm, prompts) == plain and _generate(llm, prompts) == plain
    sampled = SamplingParams(temperature=0.8, seed=3, max_tokens=24, ignore_eos=True)
    runs = [[list(o.outputs[0].token_ids) for o in llm.generate([{"prompt_token_ids": p} for p in prompts], sampled)]
            for _ in range(2)]
    assert runs[0] == runs[1]
    assert llm.engine.spec.stats.num_draft_tokens > 0


@pytest.mark.usefixtures("native_speculation")
def test_the_heads_kv_takes_its_share_of_the_kv_bound(q8):
    """Each block holds the head's K/V beside the target's: kv_cache_memory_gb buys fewer blocks than with ngram, by
    exactly one f16 attention layer's bytes a block."""
    from hearth.config import layer_caches, mtp_cache, recurrent_state_bytes
    from hearth.kvstore.codecs import CODECS, cache_block_bytes

    kw = {"kv_cache_memory_gb": 0.6 / 1024, "max_num_seqs": 4}
    blocks = lambda llm: llm.engine.scheduler.kv.pool.num_blocks  # noqa: E731
    ngram = LLM(str(q8), progress=False, speculative_config={"method": "ngram"}, **kw)
    mtp = LLM(str(q8), progress=False, speculative_config=MTP, **kw)
    bs, mc = ngram.config.block_size, ngram.model_config
    target = cache_block_bytes(CODECS["f16"], layer_caches(mc), bs)
    head = cache_block_bytes(CODECS["f16"], [mtp_cache(mc)], bs)
    state = recurrent_state_bytes(mc)
    left = int(0.6 * 2**20) - 4 * 2 * state - 8 * state  # each sequence's slot and copy, the 8 snapshots
    assert (blocks(ngram), blocks(mtp)) == (left // target, left // (target + head))


@pytest.mark.usefixtures("native_speculation")
def test_mtp_drafts_beside_prefill_chunks_are_lossless(q8):
    """A long prompt prefilled in chunks while a short one decodes with drafts: steps mixing prefill rows and verify
    rows (the trunk's last layer then runs every row, for the head's hidden states) give plain greedy's text."""
    prompts = [prompt(DIMS.vocab, n=6, seed=7), prompt(DIMS.vocab, n=120, seed=8)]
    kw = {"max_num_batched_tokens": 16, "progress": False}
    plain = _generate(LLM(str(q8), **kw), prompts)
    llm = LLM(str(q8), speculative_config=MTP, **kw)
    assert _generate(llm, prompts) == plain
    assert llm.engine.spec.stats.num_draft_tokens > 0
