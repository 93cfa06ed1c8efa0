import pytest
import torch

from hearth.config import YarnScaling
from hearth.errors import ModelLoadError
from hearth.layers import rotary
from hearth.layers.rotary import Rotary, yarn_factors


def direct(rope: Rotary, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = torch.outer(positions.to(torch.float64), rope.inv_freq)
    return freqs.cos().float(), freqs.sin().float()


def test_halves_from_the_table_equal_the_direct_values(monkeypatch):
    """cos/sin come from a table of the positions seen so far (grown when a step reaches past it),
    or, past TABLE_POSITIONS, are computed for the step: bit-identical either way."""
    monkeypatch.setattr(rotary, "TABLE_POSITIONS", 3000)
    rope = Rotary(64, 1e6, neox=True)
    steps = [torch.arange(0, 512), torch.tensor([700]), torch.arange(1000, 1600), torch.tensor([2999]),
             torch.arange(2990, 3010), torch.tensor([5, 2998, 17])]
    sizes = []
    for positions in steps:
        cos, sin = rope.halves(positions, {})
        want_cos, want_sin = direct(rope, positions)
        assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin)
        assert cos.is_contiguous() and cos.shape == (positions.numel(), 32)
        sizes.append(rope._table[0].shape[0])
    assert sizes == [1024, 1024, 2048, 3000, 3000, 3000]  # powers of two from 1024, capped; 3010 not tabled


def test_rope_factors_of_another_length_are_one_clear_error():
    """A file whose rope_freqs / rope_factors_* do not hold one factor per rotated pair is refused at load."""
    import pytest

    from hearth.errors import ModelLoadError
    from hearth.layers.rotary import RopeFactors

    with pytest.raises(ModelLoadError, match=r"rope factors \(short\): 3, but the rope rotates 8 pairs"):
        Rotary(16, 1e4, neox=True, factors=RopeFactors((1.0,) * 3))
    with pytest.raises(ModelLoadError, match=r"rope factors \(long\): 4, but the rope rotates 8 pairs"):
        Rotary(16, 1e4, neox=True, factors=RopeFactors((1.0,) * 8, (2.0,) * 4, 16))


@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_factors_are_transformers_yarn(truncate):
    """Both ways of ending the ramp (transformers' truncate; llama.cpp rounds, gpt-oss's reference does not)."""
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rot, base, original, factor = 64, 150000.0, 4096, 32.0
    cfg = transformers.GptOssConfig(head_dim=rot, max_position_embeddings=int(factor * original), rope_parameters={
        "rope_type": "yarn", "rope_theta": base, "factor": factor, "beta_fast": 32.0, "beta_slow": 1.0,
        "original_max_position_embeddings": original, "truncate": truncate})
    inv_freq, attn = ROPE_INIT_FUNCTIONS["yarn"](cfg)
    y = yarn_factors(rot, base, YarnScaling(factor, original, truncate=truncate), original)
    ours = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)) / torch.tensor(y.short)
    torch.testing.assert_close(ours.float(), inv_freq, rtol=1e-6, atol=0)
    assert y.attn_factor == pytest.approx(attn, rel=1e-7)


@pytest.mark.parametrize("top", [100, 5000], ids=["table", "past-the-table"])
def test_mrope_tables_pick_each_pairs_component_as_transformers_qwen2_vl(top):
    """Positions [3, T] (t, h, w): pair j turns by its section's component (transformers' mrope_section
    recomposition), in the [T, rot/2] layout every kernel reads; equal components are the 1-D rope's bits."""
    from transformers import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    sections = (4, 6, 6)
    rope = Rotary(32, 1e6, neox=True, sections=sections)
    g = torch.Generator().manual_seed(0)
    thw = torch.randint(0, top, (3, 40), generator=g)
    cos, sin = rope.halves(thw, {})
    assert cos.shape == (40, 16) and cos.is_contiguous() and sin.is_contiguous()
    cfg = Qwen2VLTextConfig(hidden_size=128, num_attention_heads=4, rope_parameters={
        "rope_type": "default", "rope_theta": 1e6, "mrope_section": list(sections)})
    hf_cos, hf_sin = Qwen2VLRotaryEmbedding(cfg)(torch.zeros(1, dtype=torch.float64), thw[:, None])
    tol = 2e-6 + top * 4e-7  # transformers' angles in f32 (hearth's in f64): ~1e-3 rad off at 5000
    assert torch.allclose(cos, hf_cos[0, :, :16].float(), atol=tol) and torch.allclose(sin, hf_sin[0, :, :16].float(), atol=tol)
    text = thw[0]
    assert all(torch.equal(a, b) for a, b in zip(rope.halves(text.expand(3, -1), {}), rope.halves(text, {})))
    assert not torch.allclose(cos, rope.halves(text, {})[0])  # teeth: h and w pairs move


def test_mrope_sections_must_cover_the_rotated_pairs():
    with pytest.raises(ModelLoadError, match=r"M-RoPE sections \[4, 6, 4\] cover 14 pairs, but the rope rotates 16"):
        Rotary(32, 1e6, neox=True, sections=(4, 6, 4))
    with pytest.raises(ValueError, match="positions"):
        Rotary(32, 1e6, neox=True).halves(torch.zeros(3, 4, dtype=torch.long), {})


def test_interleaved_mrope_tables_are_transformers_qwen3_vl():
    """Qwen3-VL's layout: pair j turns by t, h, w in turn (transformers' apply_interleaved_mrope over its
    sections), in the same [T, rot/2] tables; text (t = h = w) is the 1-D rope's bits."""
    from transformers import Qwen3VLTextConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

    sections = (6, 5, 5)  # 16 pairs: h at 1, 4, .., 13, w at 2, 5, .., 14, t at the rest
    rope = Rotary(32, 100.0, neox=True, sections=sections, layout="interleaved")
    assert rope.component.tolist() == [0, 1, 2] * 5 + [0]
    thw = torch.randint(0, 100, (3, 40), generator=torch.Generator().manual_seed(0))
    cos, sin = rope.halves(thw, {})
    cfg = Qwen3VLTextConfig(hidden_size=128, num_attention_heads=4, head_dim=32, rope_parameters={
        "rope_type": "default", "rope_theta": 100.0, "mrope_section": list(sections)})
    hf_cos, hf_sin = Qwen3VLTextRotaryEmbedding(cfg)(torch.zeros(1), thw[:, None])
    assert torch.allclose(cos, hf_cos[0, :, :16], atol=1e-5) and torch.allclose(sin, hf_sin[0, :, :16], atol=1e-5)
    runs = Rotary(32, 100.0, neox=True, sections=sections)  # teeth: Qwen2-VL's layout of the same sections
    assert not torch.allclose(runs.halves(thw, {})[0], hf_cos[0, :, :16], atol=1e-2) and runs.key != rope.key
    text = thw[0]
    assert all(torch.equal(a, b) for a, b in zip(rope.halves(text.expand(3, -1), {}), rope.halves(text, {})))
