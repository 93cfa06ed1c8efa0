"""Every architecture against Hugging Face transformers on the same tiny GGUF file, and the paged
cache's invariants: chunked prefill + decode == one prefill; two sequences batched == each alone."""

from __future__ import annotations

import pytest
import torch

from hearth.layers.linear import use_linear_policy
from hearth.loader.gguf_loader import GGUFFile
from hearth.backends import select
from hearth.models.registry import load_model
from tests.gguf_factory import longrope_factors, tiny_dir
from tests.hf_built import MODELS as HF_BUILT
from tests.hf_built import hf_model

import transformers  # noqa: E402  (a test dependency, pinned in constraints.txt)
transformers.logging.set_verbosity_error()

SEQ_LEN = 24  # longer than gemma3's window of 8, so the sliding mask and the global layer both matter
REL_TOL = 1e-4  # max |hearth - transformers| over all positions, relative to the largest |logit|
# The fast linear paths round activations (and f16 weights) to bf16: measured 2e-3 .. 8.5e-3 on
# these files over 3 seeds, against 2e-7 .. 5e-7 for the exact path.
REL_TOL_FAST = 2e-2

# (arch, matrix type, dims) -- one quantized and one f16 file too: transformers dequantizes them the
# same way, so they check that hearth reads the blocks, not only f32.
CASES = {
    "llama": ("llama", "F32", {}),
    "phi3": ("phi3", "F32", {}),
    # LongRoPE stretched 256 / 16: at SEQ_LEN past 16 both sides take the long factors; 3/4 of a head rotated
    "phi3-longrope": ("phi3", "F32", {"longrope_original_context": 16, "rope_dim": 12, "sliding_window": 8}),
    "phi3-rope-scaled": ("phi3", "F32", {"rope_scaling": 4.0, "sliding_window": 8}),  # a window on every layer
    "qwen2": ("qwen2", "F32", {}),
    "qwen3": ("qwen3", "F32", {}),
    "gemma2": ("gemma2", "F32", {}),
    "gemma2-rope-scaled": ("gemma2", "F32", {"rope_scaling": 4.0}),  # on every layer, the sliding ones too
    "gemma3": ("gemma3", "F32", {}),
    "gemma3-rope-scaled": ("gemma3", "F32", {"rope_scaling": 8.0}),
    "llama-q8_0": ("llama", "Q8_0", {}),
    # i-quants (codebook values, which transformers' loader dequantizes through gguf-py); IQ4_XS rows are
    # whole 256-wide superblocks
    "llama-iq4_nl": ("llama", "IQ4_NL", {}),
    "qwen3-iq4_xs": ("qwen3", "IQ4_XS", {"hidden": 256, "head_dim": 64, "ffn": 512}),
    # positions past the 16-token original context: half the pairs 8x slower, two blended
    "llama3-rope": ("llama", "F32", {"llama3_rope": (8.0, 1.0, 4.0, 16)}),
    "qwen3-f16": ("qwen3", "F16", {}),
    # YaRN 4x over a 16-token original context, betas that put a ramp over pairs 1-2 of 8 (32 and 1 blend none)
    "qwen2-yarn": ("qwen2", "F32", {"context": 64, "yarn_original_context": 16, "yarn_betas": (4.0, 0.1),
                                    "rope_theta": 10000.0}),
    "qwen3moe": ("qwen3moe", "F32", {}),
    "qwen3moe-q8_0": ("qwen3moe", "Q8_0", {}),  # each expert a 2-D view of the stacked blocks
    # transformers built from the file's weights (tests/hf_built.py): its GGUF loader does not read these
    "granite": ("granite", "F32", {}),
    "granitemoe": ("granitemoe", "F32", {}),
    "smollm3": ("smollm3", "F32", {}),
    "olmo2": ("olmo2", "F32", {}),
    "mistral3": ("mistral3", "F32", {}),  # YaRN and the attention temperature over an original context of 8
    "olmo3": ("olmo3", "F32", {}),  # sliding layers (window 8) and full ones
    "olmo3-yarn": ("olmo3", "F32", {"context": 64, "yarn_original_context": 16, "yarn_betas": (4.0, 0.1),
                                    "rope_theta": 10000.0}),  # YaRN on the full layers only
    "granite-q8_0": ("granite", "Q8_0", {}),
}


def tf_overrides(arch: str, dims) -> dict:
    """Config values transformers' GGUF loader does not read from the file (it keeps its class
    defaults), set to what the file says so both sides run the same model."""
    if dims.llama3_rope:  # the GGUF holds only rope_freqs.weight, which transformers does not read
        factor, low, high, context = dims.llama3_rope
        return {"rope_parameters": {"rope_type": "llama3", "rope_theta": dims.rope_theta, "factor": factor,
                                    "low_freq_factor": low, "high_freq_factor": high,
                                    "original_max_position_embeddings": context}}
    if dims.yarn_original_context:  # transformers' GGUF loader does not map rope.scaling.*
        fast, slow = dims.yarn_betas or (32.0, 1.0)
        return {"rope_parameters": {"rope_type": "yarn", "rope_theta": dims.rope_theta, "beta_fast": fast,
                                    "beta_slow": slow, "factor": dims.context / dims.yarn_original_context,
                                    "original_max_position_embeddings": dims.yarn_original_context}}
    if arch == "phi3":  # the file's LongRoPE factors, window and partial rotation, which the loader does not read
        rope = {"rope_type": "default", "rope_theta": dims.rope_theta}
        if dims.rope_scaling:
            rope = {"rope_type": "linear", "factor": dims.rope_scaling, "rope_theta": dims.rope_theta}
        if dims.longrope_original_context:
            short, long = longrope_factors(dims)
            rope = {"rope_type": "longrope", "rope_theta": dims.rope_theta, "short_factor": short.tolist(),
                    "long_factor": long.tolist(), "original_max_position_embeddings": dims.longrope_original_context}
        rotated = (dims.rope_dim or dims.head_dim) / dims.head_dim
        return {"rope_parameters": {**rope, "partial_rotary_factor": rotated},
                "sliding_window": dims.sliding_window or None, "original_max_position_embeddings":
                dims.longrope_original_context or dims.context}
    if arch == "qwen3":  # qwen3.attention.key_length is not mapped; the default would be 128
        return {"head_dim": dims.head_dim}
    if arch == "qwen3moe":  # expert_feed_forward_length is not mapped; norm_topk_prob is set for GGUF files
        return {"moe_intermediate_size": dims.expert_ffn}
    if arch == "gemma2":  # as gemma3's: whatever the loader maps, the file's values, stated
        rope = {"rope_type": "default", "rope_theta": dims.rope_theta}
        if dims.rope_scaling:  # one rotary for every layer
            rope = {"rope_type": "linear", "factor": dims.rope_scaling, "rope_theta": dims.rope_theta}
        return {"query_pre_attn_scalar": dims.head_dim, "head_dim": dims.head_dim, "sliding_window": dims.sliding_window,
                "attn_logit_softcapping": dims.attn_softcap, "final_logit_softcapping": dims.final_softcap,
                "rope_parameters": rope}
    if arch == "gemma3":
        # query_pre_attn_scalar defaults to 256; llama.cpp scales by 1/sqrt(head_dim) (not 27B).
        # rope.scaling.* is not mapped either; llama.cpp applies it to the global layers only.
        full = {"rope_type": "default", "rope_theta": dims.rope_theta}
        if dims.rope_scaling:
            full = {"rope_type": "linear", "factor": dims.rope_scaling, "rope_theta": dims.rope_theta}
        rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}, "full_attention": full}
        return {"query_pre_attn_scalar": dims.head_dim, "rope_parameters": rope}
    return {}


class PagedDriver:
    """A minimal stand-in for the runner: per-layer KV tensors, blocks handed out in a scrambled
    order (a sequence's pages are never contiguous), one AttentionMetadata per step."""

    def __init__(self, model, cfg, block_size: int = 4, num_blocks: int = 64, seed: int = 0, device: str = "cpu"):
        self.model, self.block_size = model, block_size
        # per layer [2, num_blocks, block_size, kv_heads, head_dim], f32 so comparisons are tight
        self.kv = [torch.zeros(2, num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim, device=device)
                   for _ in range(cfg.num_layers)]
        self.free = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
        self.tables: dict[str, list[int]] = {}
        self.lens: dict[str, int] = {}

    def step(self, batch: dict[str, list[int]]) -> dict[str, torch.Tensor]:
        """The new tokens of each sequence in one forward -> {seq: logits [n_new, vocab]}."""
        ids, positions, slots, qsl, seq_lens, tables = [], [], [], [0], [], []
        for seq, new in batch.items():
            start = self.lens.get(seq, 0)
            end = start + len(new)
            table = self.tables.setdefault(seq, [])
            while len(table) * self.block_size < end:
                table.append(self.free.pop())
            slots += [table[p // self.block_size] * self.block_size + p % self.block_size for p in range(start, end)]
            ids += new
            positions += range(start, end)
            qsl.append(qsl[-1] + len(new))
            seq_lens.append(end)
            tables.append(table)
            self.lens[seq] = end
        meta = self.model.backend.metadata(qsl, seq_lens, tables, slots, self.block_size)
        with torch.no_grad():
            hidden = self.model(torch.tensor(ids), torch.tensor(positions), meta, self.kv)
            logits = self.model.compute_logits(hidden).cpu()
        return {seq: logits[a:b] for seq, a, b in zip(batch, qsl, qsl[1:])}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(case, exact) -> (hearth model, ModelConfig, dir, file name, dims); each file written once.
    exact=True builds the slow f32 reference linears, False the fast paths hearth runs with."""
    files, built = {}, {}

    def get(case: str, exact: bool = True):
        if case not in files:
            arch, qtype, dims = CASES[case]
            files[case] = tiny_dir(tmp_path_factory.mktemp(case), arch, qtype=qtype, **dims)
        if (case, exact) not in built:
            d, name, dims = files[case]
            with use_linear_policy(exact=exact):
                model, cfg = load_model(GGUFFile(d / name), select())
            model.fit_context(SEQ_LEN)  # the sequences run here (LongRoPE: transformers' choice at this length)
            built[case, exact] = (model, cfg, d, name, dims)
        return built[case, exact]

    return get


def transformers_logits(case: str, d, name, dims, ids: list[int]) -> torch.Tensor:
    arch = CASES[case][0]
    if arch in HF_BUILT:
        ref_model = hf_model(d / name, arch, dims)
    else:
        ref_model = transformers.AutoModelForCausalLM.from_pretrained(
            d, gguf_file=name, dtype=torch.float32, attn_implementation="eager", **tf_overrides(arch, dims)
        ).eval()
    with torch.no_grad():
        return ref_model(torch.tensor([ids])).logits[0]  # [T, vocab]


def prompt(vocab: int, n: int = SEQ_LEN, seed: int = 1) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_transformers(tiny, case):
    model, cfg, d, name, dims = tiny(case, exact=True)
    ids = prompt(cfg.vocab_size)
    ours = PagedDriver(model, cfg).step({"a": ids})["a"]  # [SEQ_LEN, vocab]
    ref = transformers_logits(case, d, name, dims, ids)

    assert ours.shape == ref.shape == (SEQ_LEN, dims.vocab)
    assert rel_err(ours, ref) < REL_TOL
    # the comparison has teeth: logits at neighbouring positions are far apart
    assert rel_err(ours[1:], ref[:-1]) > 0.1


def test_longrope_takes_the_short_factors_within_the_original_context(tiny):
    """A context within the 16 tokens trained: the short factors, as transformers takes them for a
    sequence that short (and llama.cpp for -c 16); the long ones again for a longer context."""
    case = "phi3-longrope"
    model, cfg, d, name, dims = tiny(case, exact=True)
    ids = prompt(cfg.vocab_size, n=14)
    try:
        model.fit_context(16)
        ours = PagedDriver(model, cfg).step({"a": ids})["a"]
        assert rel_err(ours, transformers_logits(case, d, name, dims, ids)) < REL_TOL
        model.fit_context(17)
        assert rel_err(PagedDriver(model, cfg).step({"a": ids})["a"], ours) > 0.01
    finally:
        model.fit_context(SEQ_LEN)


@pytest.mark.parametrize("routing", [{"top_k": 1}, {"top_k": 3}, {"renorm": False}], ids=str)
def test_moe_routing_shows_in_the_logits(tiny, monkeypatch, routing):
    """The MoE comparison has teeth: other experts per token, or weights not renormalized, are far off."""
    model, cfg, d, name, dims = tiny("qwen3moe", exact=True)
    ids = prompt(cfg.vocab_size)
    ref = transformers_logits("qwen3moe", d, name, dims, ids)
    for layer in model.layers:
        for key, value in routing.items():
            monkeypatch.setattr(layer.mlp, key, value)
    assert rel_err(PagedDriver(model, cfg).step({"a": ids})["a"], ref) > 0.05


# no MoE file here: the fast paths' rounding may flip a router's near tie, a whole expert apart (avx2 did at
# one position of 24); its quantized experts are held to the torch path's with one routing (tests/models/test_moe.py)
@pytest.mark.parametrize("case", ["llama-q8_0", "qwen3-f16", "llama-iq4_nl", "qwen3-iq4_xs", "granite-q8_0"])
def test_fast_linear_logits_near_transformers(tiny, case):
    model, cfg, d, name, dims = tiny(case, exact=False)
    ids = prompt(cfg.vocab_size)
    ours = PagedDriver(model, cfg).step({"a": ids})["a"]
    assert rel_err(ours, transformers_logits(case, d, name, dims, ids)) < REL_TOL_FAST


@pytest.mark.parametrize("case", ["llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3-longrope", "qwen3moe", "granite", "granitemoe",
                                  "smollm3", "olmo2", "olmo3", "mistral3"])
def test_chunked_prefill_and_decode_equal_full_prefill(tiny, case):
    model, cfg, *_ = tiny(case, exact=False)  # f32 files: the fast path is plain f32 math
    ids = prompt(cfg.vocab_size)
    full = PagedDriver(model, cfg).step({"a": ids})["a"]

    # two prefill chunks that end mid-block, then one token at a time through the cache
    driver = PagedDriver(model, cfg, seed=7)
    parts = [driver.step({"a": ids[:7]})["a"], driver.step({"a": ids[7:18]})["a"]]
    parts += [driver.step({"a": [t]})["a"] for t in ids[18:]]
    torch.testing.assert_close(torch.cat(parts), full, rtol=0, atol=1e-5 * full.abs().max().item())


@pytest.mark.parametrize("case", ["llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3-longrope", "qwen3moe", "granite", "granitemoe",
                                  "smollm3", "olmo2", "olmo3", "mistral3"])
def test_two_sequences_batched_equal_each_alone(tiny, case):
    model, cfg, *_ = tiny(case, exact=False)
    a, b = prompt(cfg.vocab_size, 21, seed=2), prompt(cfg.vocab_size, 13, seed=3)
    schedule = [{"a": a[:10], "b": b[:12]}, {"a": a[10:], "b": b[12:]}]  # prefill+prefill, prefill+decode

    batched = PagedDriver(model, cfg)
    together = [batched.step(s) for s in schedule]
    for seq in ("a", "b"):
        alone = PagedDriver(model, cfg, seed=3)
        single = [alone.step({seq: s[seq]})[seq] for s in schedule]
        got = torch.cat([t[seq] for t in together])
        want = torch.cat(single)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * want.abs().max().item())
