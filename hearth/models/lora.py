"""LoRA adapters on a built model: each adapter pair (hearth.loader.lora_file) is checked against the
base file and lands as a term on the linear holding that matrix (q, k and v within q|k|v; gate and up
within gate|up), computed at run time with each row's scale (hearth.layers.lora).

A step where an adapter is on runs through the backend's LoRA stack where it has one (the CPU backend's
decode: the fused C++ layers with each linear's term after its matmul, hearth.backends.cpu_lora); else,
and for what that stack does not cover (prefill chunks), each layer with the ops its backend gives
ArchSpec.lora, which the fused forms refuse (hearth.models.arch_spec): op by op. A step where every
row's scales are 0 (the base model's requests) keeps the fused forms, which read the base weights alone."""

from __future__ import annotations

import re
from dataclasses import replace

from hearth.errors import ModelLoadError
from hearth.layers.lora import LoraLinear, LoraRows, LoraTerm
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.lora_file import LoraFile

TARGETS: dict[str, tuple[str, tuple[str, ...]]] = {
    # block tensor -> (the layer's linear that holds it, the block tensors before it in that linear)
    "attn_q.weight": ("attn.qkv", ()),
    "attn_k.weight": ("attn.qkv", ("attn_q.weight",)),
    "attn_v.weight": ("attn.qkv", ("attn_q.weight", "attn_k.weight")),
    "attn_qkv.weight": ("attn.qkv", ()),  # phi3: rows [q | k | v] in one matrix
    "attn_output.weight": ("attn.o", ()),
    "ffn_gate.weight": ("mlp.gate_up", ()),
    "ffn_up.weight": ("mlp.gate_up", ("ffn_gate.weight",)),  # phi3's ffn_up holds [gate | up] alone
    "ffn_down.weight": ("mlp.down", ()),
}
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")


def attach_lora(model, g: GGUFFile, adapters: list[LoraFile]) -> LoraRows:
    """Wrap model's adapted linears (adapter j's scale is column j of the rows' scales); one
    ModelLoadError line for an adapter of another architecture, a tensor the model lacks or does not
    adapt, or shapes that differ from the base's."""
    for kinds, name in ((model.cfg.conv_layers, "short-convolution"), (model.cfg.recurrent_layers, "recurrent")):
        if any(kinds):  # their layers run no LoRA ops yet (hearth.models.short_conv, hearth.models.delta_net)
            raise ModelLoadError(f"{g.path.name}: LoRA adapters on a model with {name} layers ({g.arch}): not yet")
    if why := getattr(model, "lora_refusal", None):  # layers whose forward runs no LoRA ops (gemma4's)
        raise ModelLoadError(f"{g.path.name}: LoRA adapters on {why}")
    rows = LoraRows(len(adapters))
    terms: dict[tuple[int, str], list[LoraTerm]] = {}
    for j, f in enumerate(adapters):
        if f.arch != g.arch:
            raise ModelLoadError(f"{f.path}: LoRA adapter for architecture {f.arch!r}, but the model is {g.arch!r}")
        for name, pair in f.pairs.items():
            layer, linear, start = _target(f, g, name)
            w = g.tensors[name].shape
            if (pair.b.shape[0], pair.a.shape[1]) != tuple(w):
                raise ModelLoadError(f"{f.path}: {name}: lora_b {tuple(pair.b.shape)} x lora_a {tuple(pair.a.shape)} "
                                     f"is not the base's shape {tuple(w)} (an adapter for another model?)")
            terms.setdefault((layer, linear), []).append(LoraTerm(j, start, pair.a, pair.b, f.factor(pair)))
    for (i, path), ts in terms.items():
        owner_path, attr = path.split(".")
        owner = getattr(model.layers[i], owner_path)
        setattr(owner, attr, LoraLinear(getattr(owner, attr), rows, ts))
    model.spec = replace(model.spec, lora=True)
    for layer in model.layers:  # asked again: the fused forms refuse ArchSpec.lora
        layer.lora_ops = _LoraOps(model.backend.layer_ops(layer, model.spec), rows)
    model.lora = rows
    model.lora_stack = model.backend.lora_stack(model.stack, list(model.layers), rows)
    return rows


class _LoraOps:
    """A backend's ops for ArchSpec.lora, and whether this step needs them (LoraRows.scales)."""

    def __init__(self, ops, rows: LoraRows):
        self.ops, self.rows = ops, rows

    def idle(self) -> bool:
        return self.rows.scales is None

    def for_rows(self, rows: int):
        return self.ops.for_rows(rows)


def _target(f: LoraFile, g: GGUFFile, name: str) -> tuple[int, str, int]:
    """(layer, linear, first output row in it) of an adapted base tensor."""
    if name not in g.tensors:
        raise ModelLoadError(f"{f.path}: LoRA tensor {name!r} is not in the model {g.path.name} (an adapter for "
                             "another model?)")
    m = _BLOCK.fullmatch(name)
    if m is None or m.group(2) not in TARGETS:
        raise ModelLoadError(f"{f.path}: hearth applies LoRA to the attention and dense MLP matrices "
                             f"({', '.join(TARGETS)}), not to {name}")
    linear, before = TARGETS[m.group(2)]
    p = f"blk.{m.group(1)}."
    start = sum(g.tensors[p + b].shape[0] for b in before if p + b in g.tensors)
    return int(m.group(1)), linear, start
