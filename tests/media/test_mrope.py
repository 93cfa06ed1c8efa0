"""M-RoPE positions (hearth.media.mrope) against transformers' get_rope_index, whole and in every chunking:
a chunk's positions come from its indices, the delta before it and the images it overlaps only."""

from __future__ import annotations

import pytest
import torch
import transformers

from hearth.media.inputs import MediaInput, overlapping
from hearth.media.mrope import delta_before, positions, shift

LENGTH = 40
MEDIA = [MediaInput(2, 6, b"a", None, grid=(2, 3)),  # text after it at +3 - 6
         MediaInput(10, 8, b"b", None, grid=(4, 2)),  # rows > cols
         MediaInput(20, 9, b"c", None, grid=(3, 3)),
         MediaInput(31, 5, b"d", None, grid=(1, 5))]  # one row


TEXT = dict(vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
            intermediate_size=32)
MODELS = {  # Qwen3-VL's get_rope_index is its own code (videos split by timestamps), images by the same rule
    "qwen2-vl": lambda: transformers.Qwen2VLModel(transformers.Qwen2VLConfig(
        text_config=TEXT, vision_config=dict(depth=1, embed_dim=16, hidden_size=32, num_heads=2))),
    "qwen3-vl": lambda: transformers.Qwen3VLModel(transformers.Qwen3VLConfig(
        text_config={**TEXT, "head_dim": 16}, vision_config=dict(depth=1, hidden_size=16, intermediate_size=32,
                                                                  num_heads=2, out_hidden_size=32,
                                                                  num_position_embeddings=16))),
}


@pytest.fixture(scope="module", params=list(MODELS))
def reference(request) -> tuple[list[list[int]], int]:
    """(get_rope_index's [t, h, w] for the prompt, its mrope_position_delta: where generated tokens go on)."""
    model = MODELS[request.param]()
    types = torch.zeros(1, LENGTH, dtype=torch.int)
    for m in MEDIA:
        types[0, m.offset:m.end] = 1
    grids = torch.tensor([[1, 2 * m.grid[0], 2 * m.grid[1]] for m in MEDIA])  # patches: 2 x 2 merge into a row
    pos, delta = model.get_rope_index(torch.zeros(1, LENGTH, dtype=torch.long), types, image_grid_thw=grids)
    return pos[:, 0].tolist(), int(delta)


def test_a_whole_prompt_and_what_follows_are_get_rope_index(reference):
    want, delta = reference
    assert [list(c) for c in positions(range(LENGTH), 0, MEDIA)] == want
    assert delta_before(MEDIA, LENGTH) == delta == sum(shift(m) for m in MEDIA) == -13
    after = positions([LENGTH, LENGTH + 1, LENGTH + 1, LENGTH + 2], delta, [])  # a decode's chain or tree nodes
    assert after == ([LENGTH + delta, LENGTH + 1 + delta, LENGTH + 1 + delta, LENGTH + 2 + delta],) * 3


def test_every_chunking_gives_the_whole_prompts_positions(reference):
    """A causal image cut anywhere: its rows after the cut are where the whole prompt has them."""
    want, _ = reference
    for a in range(LENGTH):
        for b in range(a + 1, LENGTH + 1):
            got = positions(range(a, b), delta_before(MEDIA, a), overlapping(MEDIA, a, b))
            assert [list(c) for c in got] == [c[a:b] for c in want], (a, b)


def test_media_without_a_grid_keep_one_position_per_row():
    media = [MediaInput(2, 6, b"a", None), MediaInput(10, 4, b"b", None, grid=(2, 2))]
    t, h, w = positions(range(16), 0, media)
    assert t == list(range(10)) + [10] * 4 + [12, 13]  # the grid-less image's rows as text
    assert h[10:] == [10, 10, 11, 11, 12, 13] and w[10:14] == [10, 11, 10, 11]
    assert delta_before(media, 16) == -2 and shift(media[0]) == 0
