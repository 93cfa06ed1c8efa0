"""llama-server's rope-scaling flags on `hearth serve` and `hearth run`: --rope-scaling yarn|linear --rope-scale F
--yarn-orig-ctx N (--yarn-beta-fast, --yarn-beta-slow) -> EngineConfig.rope_scaling, over the file's
(e.g. Qwen2.5's docs: YaRN factor 4 over its 32,768 trained tokens)."""

from __future__ import annotations

import argparse

from hearth.config import ROPE_KEYS, parse_rope_scaling
from hearth.errors import HearthError

FLAGS = {"rope_scale": "factor", "yarn_orig_ctx": "original_max_position_embeddings",
         "yarn_beta_fast": "beta_fast", "yarn_beta_slow": "beta_slow"}
"""argparse dest -> rope_scaling's key (transformers' names)."""


def add_rope_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("rope scaling (a longer context than the model was trained at)")
    g.add_argument("--rope-scaling", default=None, choices=["yarn", "linear"],
                   help="YaRN or linear (positions divided by --rope-scale) in place of the model's own scaling, "
                        "as llama-server's (default: the file's)")
    g.add_argument("--rope-scale", type=float, default=None, metavar="F",
                   help="with --rope-scaling: the context is stretched F times (Qwen2.5/Qwen3 with yarn: 4)")
    g.add_argument("--yarn-orig-ctx", type=int, default=None, metavar="N",
                   help="with --rope-scaling: the context the model was trained at (default: the file's)")
    g.add_argument("--yarn-beta-fast", type=float, default=None, metavar="B",
                   help="with --rope-scaling yarn: the ramp's extrapolated end, in turns (default: 32)")
    g.add_argument("--yarn-beta-slow", type=float, default=None, metavar="B",
                   help="with --rope-scaling yarn: the ramp's interpolated end, in turns (default: 1)")


def rope_scaling(args: argparse.Namespace) -> dict | None:
    """EngineConfig.rope_scaling from the flags (None: the file's); a bad value is one line naming its flag."""
    given = {key: v for dest, key in FLAGS.items() if (v := getattr(args, dest, None)) is not None}
    if getattr(args, "rope_scaling", None) is None:
        if given:
            flag = "--" + next(d for d, k in FLAGS.items() if k in given).replace("_", "-")
            raise HearthError(f"{flag} needs --rope-scaling yarn or linear")
        return None
    for dest, key in FLAGS.items():
        if key in given and key not in ROPE_KEYS[args.rope_scaling]:
            raise HearthError(f"--{dest.replace('_', '-')} needs --rope-scaling yarn")
    scaling = {"rope_type": args.rope_scaling, **given}
    parse_rope_scaling(scaling)
    return scaling
