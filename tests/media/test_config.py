"""read_vision_config on mmproj files as llama.cpp's converters write them, and its one-line refusals."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from hearth.errors import ModelLoadError, UnsupportedError
from hearth.media.config import check_lm_hidden, read_vision_config
from tests.mmproj_factory import tiny_hf, write_mmproj, write_settings_only

EXPECTED = {  # projector -> (layers, feature layers, merge, activation, rows, lm width)
    "mlp": (2, (2,), 1, "quick_gelu", 16, 48),  # legacy file: 3 CLIP blocks, the last dropped; class row not counted
    "gemma3": (2, (2,), 2, "gelu", 16, 48),  # 8 x 8 patches pooled 2 x 2 (scale_factor written: not 4)
    "idefics3": (2, (2,), 2, "gelu", 16, 48),  # 8 x 8 patches shuffled by 2
}


@pytest.mark.parametrize("name", EXPECTED)
def test_converted_files(tmp_path, name):
    path = tmp_path / "mmproj.gguf"
    write_mmproj(path, name, tiny_hf(name))
    cfg = read_vision_config(path)
    assert cfg.projector == name
    assert (cfg.layers, cfg.feature_layers, cfg.merge, cfg.activation, cfg.num_embeds, cfg.lm_hidden) == EXPECTED[name]
    assert (cfg.patch_size, cfg.hidden, cfg.heads, cfg.ffn) == (8, 32, 4, 64)


def test_explicit_feature_layer_is_read(tmp_path):
    path = tmp_path / "mmproj.gguf"
    write_mmproj(path, "mlp", tiny_hf("mlp"), feature_key=True)
    assert read_vision_config(path).feature_layers == (2,)


def test_idefics3_first_resize_and_gemma3_default_pool(tmp_path):
    write_mmproj(tmp_path / "i.gguf", "idefics3", tiny_hf("idefics3"))
    assert read_vision_config(tmp_path / "i.gguf").preproc_size == 96
    write_settings_only(tmp_path / "g.gguf", "gemma3", {"mm.input_projection.weight": np.zeros((32, 48), np.float32)})
    assert read_vision_config(tmp_path / "g.gguf").merge == 4  # llama.cpp's default where the file names none


def test_a_language_model_is_not_an_mmproj(tmp_path):
    write_settings_only(tmp_path / "lm.gguf", None, {"token_embd.weight": np.zeros((4, 8), np.float32)},
                        arch="llama", vision=False)
    with pytest.raises(ModelLoadError, match=r"not an mmproj file \(it has no clip.projector_type; its architecture "
                                             r"is 'llama'\)") as e:
        read_vision_config(tmp_path / "lm.gguf")
    assert "\n" not in str(e.value)


def test_unknown_projector_names_the_supported_ones(tmp_path):
    write_settings_only(tmp_path / "q.gguf", "glm4v", {})
    with pytest.raises(UnsupportedError, match=r"projector type 'glm4v' is not supported; hearth runs mlp, gemma3, "
                                               r"idefics3, qwen2vl_merger, qwen2.5vl_merger, qwen3vl_merger"):
        read_vision_config(tmp_path / "q.gguf")


def test_audio_only_mmproj_has_no_vision_tower(tmp_path):
    write_settings_only(tmp_path / "a.gguf", None, {}, vision=False, **{"clip.has_audio_encoder": True,
                                                        "clip.audio.projector_type": "ultravox"})
    write_settings_only(tmp_path / "b.gguf", "ultravox", {}, vision=False, **{"clip.has_audio_encoder": True})
    for path in (tmp_path / "a.gguf", tmp_path / "b.gguf"):
        with pytest.raises(ModelLoadError, match=r"this mmproj has no vision tower"):
            read_vision_config(path)


def test_mixed_modality_file_names_the_vision_projector_apart(tmp_path):
    write_settings_only(tmp_path / "m.gguf", None, {"mm.input_projection.weight": np.zeros((32, 48), np.float32)},
         **{"clip.vision.projector_type": "gemma3", "clip.has_audio_encoder": True})
    assert read_vision_config(tmp_path / "m.gguf").projector == "gemma3"


def test_missing_key_is_named(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "k.gguf"), "clip")
    w.add_clip_projector_type("idefics3")
    w.add_clip_has_vision_encoder(True)
    w.add_vision_image_size(64)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelLoadError, match=r"mmproj has no clip.vision.patch_size"):
        read_vision_config(tmp_path / "k.gguf")


def test_rows_must_fit_the_lm(tmp_path):
    write_mmproj(tmp_path / "m.gguf", "gemma3", tiny_hf("gemma3"))
    cfg = read_vision_config(tmp_path / "m.gguf")
    check_lm_hidden(cfg, 48)
    with pytest.raises(ModelLoadError, match=r"the mmproj makes rows of width 48 but gemma-3-270m has hidden size 640"):
        check_lm_hidden(cfg, 640, "gemma-3-270m")
    with pytest.raises(ModelLoadError, match=r"the mmproj's rows carry 0 DeepStack part\(s\) but qwen3vl adds 2"):
        check_lm_hidden(cfg, 48, "qwen3vl", deepstack=2)


def test_deepstack_rows_need_an_lm_that_adds_them(tmp_path):
    """A Qwen3-VL mmproj (2 DeepStack parts a row) fits only an LM adding as many (llama.cpp: n_embd_inp)."""
    write_mmproj(tmp_path / "q.gguf", "qwen3vl_merger", tiny_hf("qwen3vl_merger"))
    cfg = read_vision_config(tmp_path / "q.gguf")
    check_lm_hidden(cfg, 48, deepstack=2)
    with pytest.raises(ModelLoadError, match=r"the mmproj's rows carry 2 DeepStack part\(s\) but qwen3 adds 0: "
                                             r"pass the mmproj made for this model"):
        check_lm_hidden(cfg, 48, "qwen3")


def test_llava_file_from_before_the_projector_key_is_mlp(tmp_path):
    write_settings_only(tmp_path / "old.gguf", None, {"mm.2.weight": np.zeros((48, 64), np.float32)},
                        **{"clip.has_llava_projector": True})
    assert read_vision_config(tmp_path / "old.gguf").projector == "mlp"
