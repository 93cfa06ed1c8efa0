"""What differs between the projector types hearth runs, one record each (llama.cpp's
`clip.projector_type` names): how the HF image processor sizes an image, which tower reads it, how the
tower's rows merge, and how the rows sit in the prompt. The math lives once in hearth.models.vision* and
hearth.models.qwen_vision; this table picks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Projector:
    name: str
    resize: str
    """How the HF processor sizes an image (hearth.media.images.RESIZES): "crop" (CLIPImageProcessor: shortest
    edge to image_size, then a centre crop), "square" (Siglip/Gemma3ImageProcessor: straight to S x S),
    "split" (Idefics3ImageProcessor's default: longest edge to preproc_size, then a grid of S x S tiles and the
    whole image as one more, the global one), "smart" (Qwen2VLImageProcessor: the aspect kept, each side a
    multiple of patch * merge, the area within min_pixels..max_pixels)."""
    resample: str
    """PIL's Image.Resampling member by name (hearth.media.images resolves it: Pillow loads with an image)."""
    """The PIL filter of that processor's resizes (the model's preprocessor_config: gemma-3 asks bilinear)."""
    merge: str
    """How the tower's rows become fewer (hearth.models.vision_projector): "none", "avg_pool" (gemma3: k x k
    average of the patch grid), "pixel_shuffle" (idefics3: s x s neighbours concatenated), "merger" (Qwen-VL:
    each m x m unit's rows, already neighbours in the processor's order, concatenated)."""
    merge_default: int
    """k, s or m where the file names none (clip.vision.<merge_key>; llama.cpp's defaults)."""
    out_tensor: str
    out_axis: int
    """The projector's last weight and its axis (torch order) that is the LM's width: the rows' width."""
    before: str = ""
    after: str = ""
    """Prompt text right before and after the rows (the HF processor's expansion of one image)."""
    placeholder: str | None = None
    """A token whose id fills the rows' places in the prompt ids; None: the API uses id 0."""
    bidirectional: bool = False
    """The LM attends within the image's rows both ways (gemma3: HF's token_type_ids mask)."""
    tile: str = ""
    """A split image: the text before tile (row, col)'s rows, a format string (1-based, as HF's
    _prompt_split_image); `before` stays the global image's, which comes last."""
    row_end: str = ""
    """After each row of tiles."""
    global_sep: str = ""
    """Between the tiles (their last row_end) and the global image's `before`."""
    merge_key: str = "projector.scale_factor"
    """The clip.vision key that names `merge` (Qwen-VL's spatial_merge_size)."""
    tower: str = "vit"
    """Which tower reads the pixels (hearth.models.vision.TOWERS) and so how they are laid out
    (hearth.media.images.LAYOUTS): "vit" (one [3, S, S] image a piece, positions from a table), "qwen2vl"
    (Qwen-VL's flattened patches in merge-unit order, any aspect, 2-D rotary positions), "gemma4v" (one [3, H, W]
    image, any aspect: x and y position tables, 2-D rotary positions)."""
    norm: str = "layer"
    """The tower's norms and the merger's: "layer" (LayerNorm) or "rms" (Qwen2.5-VL's RMSNorm)."""
    frames: int = 1
    """A still image repeated to this many frames (Qwen-VL's temporal_patch_size 2: its Conv3d patch
    embedding, two slices v.patch_embd.weight and .weight.1 in llama.cpp's files)."""
    windows: bool = False
    """Window attention in the blocks between the full-attention ones (Qwen2.5-VL): needs
    clip.vision.n_wa_pattern, as llama.cpp does."""
    token_limits: tuple[int, int] = (8, 4096)
    """A smart-sized image's fewest and most rows where the file names no pixel bounds (llama.cpp's
    set_limit_image_tokens for the type)."""
    causal_widths: tuple[int, ...] = ()
    """Where set, the only LM widths whose image rows attend causally (gemma4v: E2B's 1536 and E4B's 2560, llama.cpp's
    mtmd_decode_use_non_causal); with another width the rows attend both ways on the sliding layers (transformers'
    use_bidirectional_attention "vision": the 31B, the 26B-A4B), which hearth does not run yet."""
    half_up: bool = False
    """The smart resize rounds halves up (llama.cpp's std::round), not to even (HF's Python round)."""
    learned_positions: bool = False
    """A learned square table of positions (v.position_embd.weight) resampled to each image's patch grid and
    added after the patch embedding, besides the blocks' 2-D rotary (Qwen3-VL)."""
    deepstack: bool = False
    """Rows from the blocks clip.vision.is_deepstack_layers marks, each through its own merger (v.deepstack.{i}),
    beside the main merger's: each row lm_hidden * (1 + deepstack) wide, llama.cpp's layout (Qwen3-VL)."""

    def befores(self, rows: int, cols: int) -> tuple[str, ...]:
        """The text before each piece's rows, in prompt order: a rows x cols grid of tiles, row by row, then the
        global image (rows = cols = 0: the global image alone, `before`)."""
        tiles = [(self.row_end if r and not c else "") + self.tile.format(row=r + 1, col=c + 1)
                 for r in range(rows) for c in range(cols)]
        return (*tiles, (self.row_end + self.global_sep if tiles else "") + self.before)


QWEN = dict(resize="smart", resample="BICUBIC", merge="merger", merge_default=2, out_tensor="mm.2.weight", out_axis=0,
            before="<|vision_start|>", after="<|vision_end|>", placeholder="<|image_pad|>",
            merge_key="spatial_merge_size", tower="qwen2vl", frames=2)
"""What Qwen2-VL's and Qwen2.5-VL's records share."""

PROJECTORS: dict[str, Projector] = {p.name: p for p in (
    # LLaVA-1.5: CLIP ViT, features of layer -2 without the class row, mm.0 -> gelu -> mm.2
    Projector("mlp", "crop", "BICUBIC", "none", 1, "mm.2.weight", 0),
    # Gemma3Processor: boi "<start_of_image>" becomes "\n\n<start_of_image>" + soft tokens + "<end_of_image>\n\n"
    Projector("gemma3", "square", "BILINEAR", "avg_pool", 4, "mm.input_projection.weight", 1,
              "\n\n<start_of_image>", "<end_of_image>\n\n", "<image_soft_token>", bidirectional=True),
    # Idefics3Processor (do_image_splitting, its default): per tile fake, <row_R_col_C>, rows; "\n" after each row;
    # then "\n", fake, global-img, rows, fake (an image no larger than one tile: the global image alone)
    Projector("idefics3", "split", "LANCZOS", "pixel_shuffle", 2, "mm.model.fc.weight", 0,
              "<fake_token_around_image><global-img>", "<fake_token_around_image>", "<image>",
              tile="<fake_token_around_image><row_{row}_col_{col}>", row_end="\n", global_sep="\n"),
    # Qwen2-VL: its chat template writes <|vision_start|><|image_pad|><|vision_end|> for an image part and
    # Qwen2VLProcessor repeats the pad once per row; Qwen2.5-VL the same, with RMSNorm and window attention
    Projector("qwen2vl_merger", **QWEN),
    Projector("qwen2.5vl_merger", **QWEN, norm="rms", windows=True),
    # Qwen3-VL: Qwen2-VL's processor (16 px patches, mean / std 0.5 from the file) and prompt text; its tower adds
    # learned positions, and mergers on some blocks' outputs (DeepStack) whose rows the LM adds after its layers
    Projector("qwen3vl_merger", **QWEN, learned_positions=True, deepstack=True),
    # Gemma 4 (llama.cpp's mtmd.cpp): "<|image>" + one "<|image|>" per row + "<image|>"; llama.cpp's dyn_size resize
    # (Qwen's smart resize: aligned to 3 x 3 pooled 16 px patches, 70..1120 rows; HF's processor instead fills a
    # max_soft_tokens budget), bicubic, no normalization (mean 0, std 1); the tower: hearth.models.gemma4_vision
    Projector("gemma4v", "smart", "BICUBIC", "avg_pool", 3, "mm.input_projection.weight", 0, "<|image>", "<image|>",
              "<|image|>", tower="gemma4v", norm="rms", token_limits=(70, 1120),
              half_up=True, causal_widths=(1536, 2560)),
)}
