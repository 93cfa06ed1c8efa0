"""A Qwen3-VL mmproj (rows with DeepStack parts) beside an LM that adds none is refused when the LLM loads, in one
line, as llama.cpp's mtmd refuses an mmproj whose row width is not the LM's n_embd_inp; the qwen3vl LM that adds
them is the other helper's (its glue passes its n_deepstack_layers to check_lm_hidden)."""

from __future__ import annotations

import pytest

from hearth import LLM
from hearth.errors import ModelLoadError
from tests import mmproj_factory


def test_deepstack_rows_beside_a_plain_lm_are_refused_at_load(tmp_path):
    model, mmproj, _ = mmproj_factory.tiny_vision_model(tmp_path, "qwen3", "qwen3vl_merger")
    with pytest.raises(ModelLoadError, match=r"the mmproj's rows carry 2 DeepStack part\(s\) but the model '.*' "
                                             r"adds 0: pass the mmproj made for this model") as e:
        LLM(str(model), mmproj=str(mmproj), max_model_len=128, progress=False)
    assert "\n" not in str(e.value)
