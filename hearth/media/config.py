"""The vision settings of a llama.cpp mmproj GGUF (general.architecture "clip"), as its converters write
them: convert_hf_to_gguf.py --mmproj (gemma3, idefics3, Qwen2-VL's and Qwen2.5-VL's mergers) and the legacy
convert_image_encoder_to_gguf.py (LLaVA-1.5's `mlp`). Key names are gguf-py's Keys.Clip / Keys.ClipVision and
llama.cpp's clip-impl.h."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from hearth.errors import ModelLoadError, UnsupportedError
from hearth.loader.fingerprint import model_fingerprint
from hearth.loader.gguf_loader import GGUFFile
from hearth.media.projectors import PROJECTORS, Projector

CLIP = "clip.vision."


@dataclass(frozen=True, slots=True)
class VisionConfig:
    projector: str
    """llama.cpp's clip.projector_type: "mlp" | "gemma3" | "idefics3" (hearth.media.projectors.PROJECTORS)."""
    lm_hidden: int
    """Width of the rows it makes: must equal the LM's hidden size (checked where the two meet)."""
    image_size: int
    """Side of the square the tower reads, in pixels (Qwen-VL's files say 560, which nothing reads: its images
    keep their aspect, min_pixels..max_pixels)."""
    patch_size: int
    hidden: int
    """The tower's width (clip.vision.embedding_length)."""
    ffn: int
    """The MLP's width as the file says it (Qwen2-VL's converter writes the LM's width here: its tower reads the
    MLP's from the tensors)."""
    heads: int
    layers: int
    """Blocks the file holds (the legacy LLaVA converter already dropped those past the feature layer)."""
    eps: float
    """The tower's LayerNorm epsilon; also gemma3's soft-embedding RMS norm's (HF: vision layer_norm_eps)."""
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    activation: str
    """The tower's MLP activation: "gelu" (tanh form: clip.use_gelu, SigLIP's gelu_pytorch_tanh), "silu",
    or "quick_gelu" (neither key: CLIP's)."""
    feature_layers: tuple[int, ...]
    """Hidden states the features are (0: the embeddings, i: after block i), concatenated; clip.vision.feature_layer
    or, where absent, the last block's (its output norm applied when the file has v.post_ln)."""
    merge: int = 1
    """gemma3: the average pool's side; idefics3: the pixel shuffle's scale factor; mlp: 1."""
    preproc_size: int = 0
    """idefics3: the longest edge of the processor's first resize (clip.vision.preproc_image_size)."""
    min_pixels: int = 0
    max_pixels: int = 0
    """Qwen-VL's smart resize brings an image's area within these (clip.vision.image_min_pixels and
    image_max_pixels, else llama.cpp's limits: 8 and 4096 rows of (patch * merge) ** 2 pixels); 0: not used."""
    window: int = 0
    """Qwen2.5-VL: a window's side in pixels (clip.vision.window_size, else 112, llama.cpp's and HF's); 0: none."""
    wa_pattern: int = 0
    """Qwen2.5-VL: block i attends to the whole image where (i + 1) % wa_pattern == 0, the others within
    windows (clip.vision.n_wa_pattern; HF's fullatt_block_indexes, evenly spaced); 0: every block whole."""
    deepstack: int = 0
    """Qwen3-VL: the extra parts each row carries after its first lm_hidden columns, part i (1-based) the
    DeepStack rows the LM adds to its hidden state after decoder layer i - 1 (len(deepstack_layers))."""
    deepstack_layers: tuple[int, ...] = ()
    """Qwen3-VL: the blocks (0-based) whose outputs make those parts, in order (clip.vision.is_deepstack_layers)."""
    weights: str = ""
    """The mmproj file's fingerprint (hearth.loader.fingerprint: its pull marker's sha256, else size and
    ~16 MB sampled): an image's digest takes it, so two files with one config and other weights (F16 vs
    Q8_0, a fine-tune) never share the prefix cache's or the disk tier's K/V of its rows."""

    @property
    def spec(self) -> Projector:
        return PROJECTORS[self.projector]

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def num_embeds(self) -> int:
        """Rows one image becomes: the patch grid merged `merge` x `merge` (LLaVA's class row dropped); for a
        smart resize (Qwen-VL) the most an image becomes (its own count is its PreparedImage's)."""
        if self.max_pixels:
            return self.max_pixels // (self.patch_size * self.merge) ** 2
        return (self.patches_per_side // self.merge) ** 2


def read_vision_config(path: str | os.PathLike) -> VisionConfig:
    """The VisionConfig of an mmproj file; a one-line ModelLoadError for a file that is not one (or one
    without a vision tower), UnsupportedError for a projector type hearth does not run."""
    return vision_config(GGUFFile(path))


def check_lm_hidden(cfg: VisionConfig, hidden: int, where: str = "the model", deepstack: int = 0) -> None:
    """ModelLoadError unless the rows fit the LM: an mmproj made for another model (another width), or one whose
    rows carry another number of DeepStack parts than the LM adds (`deepstack`: its n_deepstack_layers; llama.cpp's
    mtmd compares the whole row width, lm_hidden * (1 + deepstack), with the LM's n_embd_inp)."""
    if cfg.lm_hidden != hidden:
        raise ModelLoadError(f"the mmproj makes rows of width {cfg.lm_hidden} but {where} has hidden size {hidden}: "
                             "pass the mmproj made for this model")
    if cfg.spec.causal_widths and hidden not in cfg.spec.causal_widths:
        raise UnsupportedError(f"{where} (hidden size {hidden}) reads {cfg.projector} images with attention both ways "
                               "within an image on its sliding layers, which hearth does not run yet; images run "
                               f"on the models of hidden size {' or '.join(map(str, cfg.spec.causal_widths))} "
                               "(Gemma 4 E2B, E4B)")
    if cfg.deepstack != deepstack:
        raise ModelLoadError(f"the mmproj's rows carry {cfg.deepstack} DeepStack part(s) but {where} adds "
                             f"{deepstack}: pass the mmproj made for this model")


def vision_config(g: GGUFFile) -> VisionConfig:
    """read_vision_config of a file already open (VisionEncoder.load reads its tensors from the same one)."""
    name = _projector_type(g)
    spec = PROJECTORS[name]
    need = _required(g)
    image_size, patch_size = need("image_size"), need("patch_size")
    layers = need("block_count")
    merge = int(g.get(CLIP + spec.merge_key, spec.merge_default)) if spec.merge != "none" else 1
    cfg = VisionConfig(
        projector=name, lm_hidden=_lm_hidden(g, spec), image_size=image_size, patch_size=patch_size,
        hidden=need("embedding_length"), ffn=need("feed_forward_length"), heads=need("attention.head_count"),
        layers=layers, eps=float(need("attention.layer_norm_epsilon")),
        mean=_triple(g, "image_mean"), std=_triple(g, "image_std"), activation=_activation(g),
        feature_layers=tuple(int(i) for i in np.atleast_1d(g.get(CLIP + "feature_layer", layers))),
        merge=merge, preproc_size=int(g.get(CLIP + "preproc_image_size", image_size)),
        weights=model_fingerprint(g.path), **_smart(g, spec, (patch_size * merge) ** 2), **_windows(g, spec, need),
        **_deepstack(g, spec, layers))
    _check(g, cfg)
    return cfg


def _projector_type(g: GGUFFile) -> str:
    # mixed-modality files name each tower's projector apart (clip.vision.projector_type); LLaVA files from
    # before the key (late 2023) say only clip.has_llava_projector, which llama.cpp then read as mlp
    name = g.get("clip.projector_type") or g.get(CLIP + "projector_type")
    if name is None and g.get("clip.has_llava_projector", False):
        name = "mlp"
    if g.arch != "clip" or (name is None and not g.get("clip.has_audio_encoder", False)):
        raise ModelLoadError(f"{g.path}: not an mmproj file (it has no clip.projector_type; "
                             f"its architecture is {g.arch!r}): pass a llama.cpp mmproj GGUF")
    if not g.get("clip.has_vision_encoder", True) or CLIP + "image_size" not in g.metadata:
        raise ModelLoadError(f"{g.path}: this mmproj has no vision tower (an audio-only projector?): "
                             "images need one with clip.has_vision_encoder")
    if name not in PROJECTORS:
        raise UnsupportedError(f"{g.path}: mmproj projector type {name!r} is not supported; "
                               f"hearth runs {', '.join(PROJECTORS)}")
    return str(name)


def _required(g: GGUFFile):
    def need(key: str):
        value = g.get(CLIP + key)
        if value is None:
            raise ModelLoadError(f"{g.path}: mmproj has no {CLIP + key}")
        return value
    return need


def _triple(g: GGUFFile, key: str) -> tuple[float, float, float]:
    values = g.get(CLIP + key)
    if values is None or len(values) != 3:
        raise ModelLoadError(f"{g.path}: mmproj needs {CLIP + key} with 3 values (one per RGB channel)")
    return tuple(float(v) for v in values)


def _activation(g: GGUFFile) -> str:
    # llama.cpp's clip.cpp: use_gelu -> ggml_gelu (tanh form), use_silu -> silu, neither -> gelu_quick
    if g.get("clip.use_gelu", False):
        return "gelu"
    return "silu" if g.get("clip.use_silu", False) else "quick_gelu"


def _lm_hidden(g: GGUFFile, spec: Projector) -> int:
    # the projector's output width; clip.vision.projection_dim is CLIP's own in legacy LLaVA files
    return g.tensor(spec.out_tensor).shape[spec.out_axis]


def _smart(g: GGUFFile, spec: Projector, unit: int) -> dict:
    """A smart resize's area bounds (llama.cpp's set_limit_image_tokens(8, 4096) where the file names none)."""
    if spec.resize != "smart":
        return {}
    fewest, most = spec.token_limits
    return {"min_pixels": int(g.get(CLIP + "image_min_pixels", fewest * unit)),
            "max_pixels": int(g.get(CLIP + "image_max_pixels", most * unit))}


def _windows(g: GGUFFile, spec: Projector, need) -> dict:
    if not spec.windows:
        return {}
    return {"window": int(g.get(CLIP + "window_size", 112)), "wa_pattern": int(need("n_wa_pattern"))}


def _deepstack(g: GGUFFile, spec: Projector, layers: int) -> dict:
    """The blocks with a DeepStack merger: those whose v.deepstack.{i} tensors the file holds (llama.cpp's rule),
    which must be those clip.vision.is_deepstack_layers marks where the file has the key (the converter's)."""
    if not spec.deepstack:
        return {}
    found = tuple(i for i in range(layers) if f"v.deepstack.{i}.fc1.weight" in g.tensors)
    marked = g.get(CLIP + "is_deepstack_layers")
    if marked is not None and (len(marked) != layers or found != tuple(i for i, on in enumerate(marked) if on)):
        raise ModelLoadError(f"{g.path}: mmproj's clip.vision.is_deepstack_layers {[bool(m) for m in marked]} does "
                             f"not name the blocks it has v.deepstack tensors for {list(found)}")
    return {"deepstack": len(found), "deepstack_layers": found}


def _check(g: GGUFFile, cfg: VisionConfig) -> None:
    if cfg.image_size % cfg.patch_size or cfg.hidden % cfg.heads:
        raise ModelLoadError(f"{g.path}: mmproj image_size {cfg.image_size} / patch_size {cfg.patch_size} or "
                             f"embedding_length {cfg.hidden} / head_count {cfg.heads} is not whole")
    if cfg.patches_per_side % cfg.merge and not cfg.max_pixels:  # a smart-sized image reads no image_size
        raise ModelLoadError(f"{g.path}: mmproj's {cfg.patches_per_side} patches per side do not merge by "
                             f"{cfg.merge} ({cfg.projector})")
    unit = cfg.patch_size * cfg.merge
    if cfg.max_pixels and not unit * unit <= cfg.min_pixels <= cfg.max_pixels:
        raise ModelLoadError(f"{g.path}: mmproj image_min_pixels {cfg.min_pixels} / image_max_pixels "
                             f"{cfg.max_pixels} do not hold one {unit} x {unit} unit")
    if cfg.window % unit or (cfg.window and cfg.wa_pattern <= 0):
        raise ModelLoadError(f"{g.path}: mmproj window_size {cfg.window} (a multiple of {unit} wanted) or "
                             f"n_wa_pattern {cfg.wa_pattern} (> 0 wanted) does not fit")
    bad = [i for i in cfg.feature_layers if not 0 <= i <= cfg.layers]
    if bad or not cfg.feature_layers:
        raise ModelLoadError(f"{g.path}: mmproj feature layers {list(cfg.feature_layers)} are not within its "
                             f"{cfg.layers} blocks")
