"""llama-server's rope flags on `hearth serve` and `hearth run`: --rope-scaling yarn|linear|none --rope-scale F
(or --rope-freq-scale 1/F) --yarn-orig-ctx N (--yarn-beta-fast, --yarn-beta-slow) -> EngineConfig.rope_scaling,
--rope-freq-base N -> EngineConfig.rope_freq_base, over the file's (e.g. Qwen2.5's docs: YaRN factor 4 over its
32,768 trained tokens); vLLM's --hf-overrides with its rope keys sets the same two."""

from __future__ import annotations

import argparse
import json

from hearth.config import ROPE_KEYS, parse_rope_scaling
from hearth.errors import HearthError

FLAGS = {"rope_scale": "factor", "yarn_orig_ctx": "original_max_position_embeddings",
         "yarn_beta_fast": "beta_fast", "yarn_beta_slow": "beta_slow"}
"""argparse dest -> rope_scaling's key (transformers' names)."""

HF_KEYS = ("rope_parameters", "rope_scaling", "rope_theta")
"""The keys of vLLM's --hf-overrides that hearth reads: transformers v5's rope_parameters (its rope_theta inside),
or v4's rope_scaling and rope_theta; a GGUF's other settings are its own."""


def add_rope_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("rope scaling (a longer context than the model was trained at)")
    g.add_argument("--rope-scaling", default=None, choices=["yarn", "linear", "none"],
                   help="YaRN, linear (positions divided by --rope-scale) or none (no scaling, even where the file "
                        "has some) in place of the model's own scaling, as llama-server's (default: the file's)")
    g.add_argument("--rope-scale", type=float, default=None, metavar="F",
                   help="the context is stretched F times (Qwen2.5/Qwen3 with yarn: 4); without --rope-scaling, in "
                        "the file's kind (yarn where its rope is yarn, else linear), as llama-server's")
    g.add_argument("--rope-freq-scale", type=float, default=None, metavar="F",
                   help="llama-server's inverse spelling of --rope-scale: the context is stretched 1/F times")
    g.add_argument("--rope-freq-base", type=float, default=None, metavar="N",
                   help="rope base frequency (theta) in place of the file's; sliding-window layers keep theirs, as "
                        "llama-server's (default: the file's)")
    g.add_argument("--yarn-orig-ctx", type=int, default=None, metavar="N",
                   help="with --rope-scaling: the context the model was trained at (default: the file's)")
    g.add_argument("--yarn-beta-fast", type=float, default=None, metavar="B",
                   help="with --rope-scaling yarn: the ramp's extrapolated end, in turns (default: 32)")
    g.add_argument("--yarn-beta-slow", type=float, default=None, metavar="B",
                   help="with --rope-scaling yarn: the ramp's interpolated end, in turns (default: 1)")
    g.add_argument("--hf-overrides", default=None, metavar="JSON",
                   help="vLLM's, its rope keys: '{\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                        "\"original_max_position_embeddings\": 32768, \"rope_theta\": N}}' (or rope_scaling and "
                        "rope_theta), in place of the rope flags")


def rope_scaling(args: argparse.Namespace) -> dict | None:
    """EngineConfig.rope_scaling from the flags (None: the file's); a bad value is one line naming its flag."""
    given, flags = _given(args)
    kind = getattr(args, "rope_scaling", None)
    hf_scaling, _ = _hf_rope(args)
    if hf_scaling is not None:
        return hf_scaling
    for key in given:
        if key not in ROPE_KEYS[kind]:
            takers = [k for k, keys in ROPE_KEYS.items() if k and key in keys]
            raise HearthError(f"{flags[key]} needs --rope-scaling {' or '.join(takers)}")
    scaling = {"rope_type": kind, **given} if kind else given or None
    parse_rope_scaling(scaling)
    return scaling


def rope_freq_base(args: argparse.Namespace) -> float:
    """EngineConfig.rope_freq_base: --rope-freq-base, or --hf-overrides' rope_theta (0: the file's)."""
    base = getattr(args, "rope_freq_base", None)
    _, theta = _hf_rope(args)
    base = theta if theta is not None else base
    if base is not None and (isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 0):
        flag = "--hf-overrides: rope_theta" if theta is not None else "--rope-freq-base"
        raise HearthError(f"{flag} must be a positive base frequency, not {base}")
    return float(base or 0.0)


def _given(args: argparse.Namespace) -> tuple[dict, dict]:
    """(rope_scaling's keys the flags give, key -> the flag that gave it); --rope-freq-scale F gives factor 1/F."""
    given = {key: v for dest, key in FLAGS.items() if (v := getattr(args, dest, None)) is not None}
    flags = {key: "--" + dest.replace("_", "-") for dest, key in FLAGS.items()}
    freq_scale = getattr(args, "rope_freq_scale", None)
    if freq_scale is not None:
        if "factor" in given:
            raise HearthError("--rope-freq-scale F and --rope-scale 1/F set the same factor: give one")
        if not 0 < freq_scale <= 1:
            raise HearthError(f"--rope-freq-scale must be in (0, 1] (the context is stretched 1/F times), "
                              f"not {freq_scale}")
        given["factor"], flags["factor"] = 1 / freq_scale, "--rope-freq-scale"
    return given, flags


def _hf_rope(args: argparse.Namespace) -> tuple[dict | None, float | None]:
    """(rope_scaling, rope_theta) from vLLM's --hf-overrides (None, None: not given); one line naming it if bad."""
    text = getattr(args, "hf_overrides", None)
    if text is None:
        return None, None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise HearthError(f"--hf-overrides must be a JSON object: {e}") from None
    if not isinstance(d, dict):
        raise HearthError(f"--hf-overrides must be a JSON object, not {text}")
    unknown = sorted(set(d) - set(HF_KEYS))
    if unknown:
        raise HearthError(f"--hf-overrides: hearth reads {', '.join(HF_KEYS)} (a GGUF's other settings are its own), "
                          f"not {', '.join(unknown)}")
    rope_flags = [f for f in ("rope_scaling", "rope_freq_base", "rope_freq_scale", *FLAGS)
                  if getattr(args, f, None) is not None]
    if rope_flags:
        raise HearthError(f"--hf-overrides sets the rope: drop --{rope_flags[0].replace('_', '-')}")
    scaling = d.get("rope_parameters", d.get("rope_scaling"))
    if scaling is not None and not isinstance(scaling, dict):
        raise HearthError(f"--hf-overrides: rope_parameters must be an object, not {scaling}")
    scaling = dict(scaling or {})
    theta = scaling.pop("rope_theta", d.get("rope_theta"))
    if scaling:
        try:
            parse_rope_scaling(scaling)
        except HearthError as e:
            raise HearthError(f"--hf-overrides: {e}") from None
    return scaling or None, theta
