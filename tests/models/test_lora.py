"""LoRA adapters (llama.cpp's GGUF form) against transformers running the merged weights
W + scale * (alpha / rank) * B @ A in f32; scale 0 is the base model; rows of one step with different
scales each equal their own run; adapters that do not fit the model are one clear error."""

from __future__ import annotations

import pytest
import torch

from hearth.backends import select
from hearth.backends.base import TORCH_OPS
from hearth.errors import ModelLoadError
from hearth.kernels import native
from hearth.layers.linear import use_linear_policy
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.lora_file import read_lora
from hearth.models.lora import attach_lora
from hearth.models.registry import load_model
from tests.gguf_factory import write_tiny_gguf
from tests.lora_factory import merged, write_lora_gguf
from tests.models.test_logits_vs_transformers import (REL_TOL, REL_TOL_FAST, PagedDriver, prompt, rel_err,
                                                      transformers_logits)

ALPHA, RANK = 8.0, 4
# every adapted matrix llama.cpp's converter writes for these files' layouts (phi3: q|k|v and gate|up fused)
MATRICES = {
    "llama": ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"),
    "qwen2": ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"),
    "phi3": ("attn_qkv", "attn_output", "ffn_up", "ffn_down"),
}


def targets(arch: str, layers: int = 2) -> list[str]:
    return [f"blk.{i}.{m}.weight" for i in range(layers) for m in MATRICES[arch]]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """arch -> (dir, base file name, adapter path, pairs, dims), each written once."""
    made = {}

    def get(arch: str, alpha: float | None = ALPHA):
        if (arch, alpha) not in made:
            d = tmp_path_factory.mktemp(f"lora-{arch}")
            dims = write_tiny_gguf(d / "base.gguf", arch)
            pairs = write_lora_gguf(d / "adapter.gguf", d / "base.gguf", targets(arch, dims.layers), RANK, alpha)
            made[arch, alpha] = (d, "base.gguf", d / "adapter.gguf", pairs, dims)
        return made[arch, alpha]

    return get


def build(d, name, adapters=(), exact=True):
    with use_linear_policy(exact=exact):
        model, cfg = load_model(GGUFFile(d / name), select())
    if adapters:
        attach_lora(model, GGUFFile(d / name), [read_lora(p) for p in adapters])
    return model, cfg


def run(model, cfg, batch: dict[str, list[int]], scales: dict[str, float] | None = None):
    if model.lora is not None:
        model.lora.set([(scales[s],) for s in batch], [len(ids) for ids in batch.values()])
    return PagedDriver(model, cfg).step(batch)


def reference(tmp_path, arch, dims, pairs, scale, alpha, ids) -> torch.Tensor:
    """transformers' logits for the base file with the adapter merged into its f32 weights."""
    write_tiny_gguf(tmp_path / "merged.gguf", arch, adjust=merged(pairs, scale, alpha))
    return transformers_logits(arch, tmp_path, "merged.gguf", dims, ids)


@pytest.mark.parametrize("arch", list(MATRICES))
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_adapter_logits_equal_transformers_on_merged_weights(files, tmp_path, arch, scale):
    d, name, adapter, pairs, dims = files(arch)
    model, cfg = build(d, name, [adapter])
    ids = prompt(cfg.vocab_size)
    ours = run(model, cfg, {"a": ids}, {"a": scale})["a"]
    ref = reference(tmp_path, arch, dims, pairs, scale, ALPHA, ids)
    assert rel_err(ours, ref) < REL_TOL
    # teeth: another scale, or the scale without alpha / rank, is far off
    assert rel_err(ours, reference(tmp_path, arch, dims, pairs, 2 * scale, ALPHA, ids)) > 50 * REL_TOL
    assert rel_err(ours, reference(tmp_path, arch, dims, pairs, scale, None, ids)) > 50 * REL_TOL


def test_without_alpha_the_scale_alone_multiplies(files, tmp_path):
    """llama-adapter.h: alpha ? scale * alpha / rank : scale."""
    d, name, adapter, pairs, dims = files("llama", alpha=None)
    model, cfg = build(d, name, [adapter])
    ids = prompt(cfg.vocab_size)
    ours = run(model, cfg, {"a": ids}, {"a": 0.7})["a"]
    assert rel_err(ours, reference(tmp_path, "llama", dims, pairs, 0.7, None, ids)) < REL_TOL


def test_scale_zero_is_the_base_model(files):
    d, name, adapter, _, _ = files("llama")
    base, cfg = build(d, name)
    model, _ = build(d, name, [adapter])
    ids = prompt(cfg.vocab_size)
    assert torch.equal(run(model, cfg, {"a": ids}, {"a": 0.0})["a"], run(base, cfg, {"a": ids})["a"])
    assert rel_err(run(model, cfg, {"a": ids}, {"a": 1.0})["a"], run(base, cfg, {"a": ids})["a"]) > 0.01


def test_rows_of_one_step_take_their_own_scales(files):
    """Per-request scales in one batch: each sequence's logits are its run alone; and with only the last
    rows going past the last layer (the runner's out_rows), those rows' scales."""
    d, name, adapter, _, _ = files("qwen2")
    model, cfg = build(d, name, [adapter])
    a, b = prompt(cfg.vocab_size, 10, seed=2), prompt(cfg.vocab_size, 7, seed=3)
    both = run(model, cfg, {"a": a, "b": b}, {"a": 1.0, "b": 0.25})
    for seq, ids, scale in (("a", a, 1.0), ("b", b, 0.25)):
        alone = run(model, cfg, {seq: ids}, {seq: scale})[seq]
        assert rel_err(both[seq], alone) < 1e-5
    model.lora.set([(1.0,), (0.25,)], [len(a), len(b)])
    driver = PagedDriver(model, cfg)
    meta = model.backend.metadata([0, 10, 17], [10, 7], [[0, 1, 2], [3, 4]], list(range(10)) + list(range(12, 19)), 4)
    with torch.no_grad():
        last = model(torch.tensor(a + b), torch.tensor(list(range(10)) + list(range(7))), meta, driver.kv,
                     out_rows=[9, 16])
        logits = model.compute_logits(last)
    assert rel_err(logits, torch.stack([both["a"][-1], both["b"][-1]])) < 1e-5


def test_fast_paths_run_the_adapter_op_by_op(files, tmp_path):
    """The fast linears of the backend this machine runs, op by op: near the merged reference."""
    d, name, adapter, pairs, dims = files("llama")
    model, cfg = build(d, name, [adapter], exact=False)
    assert all(layer.lora_ops.ops is TORCH_OPS for layer in model.layers)  # the fused layer refuses ArchSpec.lora
    ids = prompt(cfg.vocab_size)
    ours = run(model, cfg, {"a": ids}, {"a": 1.0})["a"]
    assert rel_err(ours, reference(tmp_path, "llama", dims, pairs, 1.0, ALPHA, ids)) < REL_TOL_FAST


def test_steps_without_an_adapter_keep_the_fused_forms(tmp_path, monkeypatch):
    """A quantized file (the native kernels' where built): a step with every scale 0 runs the fused layers
    and stack, bit for bit the base model's; a step with an adapter on never the stack, near the exact
    path's f32 math on the same file."""
    dims = write_tiny_gguf(tmp_path / "q8.gguf", "llama", qtype="Q8_0")
    write_lora_gguf(tmp_path / "lora.gguf", tmp_path / "q8.gguf", targets("llama", dims.layers), RANK, ALPHA)
    model, cfg = build(tmp_path, "q8.gguf", [tmp_path / "lora.gguf"], exact=False)
    base, _ = build(tmp_path, "q8.gguf", exact=False)
    exact, _ = build(tmp_path, "q8.gguf", [tmp_path / "lora.gguf"], exact=True)
    assert [type(layer.ops) for layer in model.layers] == [type(layer.ops) for layer in base.layers]
    assert (model.stack is None) == (base.stack is None)
    ids = prompt(cfg.vocab_size)
    assert torch.equal(run(model, cfg, {"a": ids}, {"a": 0.0})["a"], run(base, cfg, {"a": ids})["a"])
    if model.stack is not None:
        monkeypatch.setattr(model.stack, "run", lambda *a: pytest.fail("the fused stack ran an adapter's step"))
    ours = run(model, cfg, {"a": ids}, {"a": 0.5})["a"]
    # measured 1.8e-2 (torch tier), 2.3e-2 (avx512), 2.1e-2 (avx2); the file without the adapter, op by op:
    # 0.9e-2 .. 1.3e-2. A random adapter as large as the weights (scale 1) amplifies the fast paths' rounding:
    # 7e-2 at one position of 24 on the torch tier
    assert rel_err(ours, run(exact, cfg, {"a": ids}, {"a": 0.5})["a"]) < 2 * REL_TOL_FAST
    assert rel_err(ours, run(base, cfg, {"a": ids})["a"]) > 10 * REL_TOL_FAST


def test_adapters_that_do_not_fit_are_one_line(files, tmp_path):
    d, name, adapter, _, _ = files("llama")
    q_d, q_name, q_adapter, _, _ = files("qwen2")
    model, _ = build(d, name)
    g = GGUFFile(d / name)
    with pytest.raises(ModelLoadError, match="architecture 'qwen2', but the model is 'llama'"):
        attach_lora(model, g, [read_lora(q_adapter)])
    with pytest.raises(ModelLoadError, match="not a LoRA adapter"):
        read_lora(d / name)
    write_tiny_gguf(tmp_path / "wide.gguf", "llama", hidden=96)
    write_lora_gguf(tmp_path / "wide-lora.gguf", tmp_path / "wide.gguf", ["blk.0.attn_q.weight"])
    with pytest.raises(ModelLoadError, match=r"is not the base's shape \(64, 64\)"):
        attach_lora(model, g, [read_lora(tmp_path / "wide-lora.gguf")])
    write_tiny_gguf(tmp_path / "deep.gguf", "llama", layers=3)
    write_lora_gguf(tmp_path / "deep-lora.gguf", tmp_path / "deep.gguf", ["blk.2.attn_q.weight"])
    with pytest.raises(ModelLoadError, match="'blk.2.attn_q.weight' is not in the model"):
        attach_lora(model, g, [read_lora(tmp_path / "deep-lora.gguf")])
    write_lora_gguf(tmp_path / "head-lora.gguf", d / name, ["output.weight"])
    with pytest.raises(ModelLoadError, match="not to output.weight"):
        attach_lora(model, g, [read_lora(tmp_path / "head-lora.gguf")])
    with pytest.raises(ModelLoadError, match="no such file"):
        read_lora(tmp_path / "missing.gguf")


def _stack_runs(model) -> list[int]:
    """The layers the fused LoRA stack ran, one entry per call (wrapped around model.lora_stack.run)."""
    done, run = [], model.lora_stack.run

    def counted(*a):
        out = run(*a)
        done.append(out[0])
        return out
    model.lora_stack.run = counted
    return done


def _f16_driver(model, cfg) -> PagedDriver:
    """A PagedDriver over f16 caches (the fused stacks read f16/bf16 pages, not the f32 ones of the others)."""
    driver = PagedDriver(model, cfg)
    driver.kv = [k.half() for k in driver.kv]
    return driver


def _steps(model, cfg, steps: list[dict[str, tuple[list[int], float]]]) -> list[dict[str, torch.Tensor]]:
    """Each step's {seq: (new ids, scale)} through one driver: its logits."""
    driver, out = _f16_driver(model, cfg), []
    for batch in steps:
        if model.lora is not None:
            model.lora.set([(s,) for _, s in batch.values()], [len(ids) for ids, _ in batch.values()])
        out.append(driver.step({seq: ids for seq, (ids, _) in batch.items()}))
    return out


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """arch -> (model with a rank-32 adapter on every matrix, cfg, base model without it), on a Q8_0 file
    with the linears hearth runs (the native kernels where this tier has them). Rank 32: q|k|v's term
    splits over the threads in a step of 8 rows (csrc/lora_layer.h's LORA_SPLIT_WORK), the others do not."""
    made = {}

    def get(arch: str):
        if arch not in made:
            d = tmp_path_factory.mktemp(f"lora-q8-{arch}")
            # head_dim 32: the fused layer's kernels take no 16 (llama's and qwen2's tiny default)
            dims = write_tiny_gguf(d / "q8.gguf", arch, qtype="Q8_0", **({} if arch == "gemma3" else WIDE),
                                   **DEPTH.get(arch, {}))
            names = [f"blk.{i}.{m}.weight" for i in range(dims.layers) for m in MATRICES["llama"]]
            write_lora_gguf(d / "lora.gguf", d / "q8.gguf", names, 32, 8.0)
            model, cfg = build(d, "q8.gguf", [d / "lora.gguf"], exact=False)
            made[arch] = (model, cfg, build(d, "q8.gguf", exact=False)[0])
        return made[arch]

    return get


WIDE = {"hidden": 128, "head_dim": 32}
# smollm3's tiny 8 layers: 4, its 4th NoPE. Deeper, both paths' f32 roundings (sums in another order) flip more f16
# K/V roundings and 8-bit activation codes, each compounding: llama at 8 layers measured a median 3e-3 too
DEPTH = {"smollm3": {"layers": 4}}


def _f32_ops(model):
    """The op-by-op path's activations in f32 (the fast linears' bf16 otherwise), as the fused layers have
    them; returns the undo."""
    saved = []
    for layer in model.layers:
        for owner in (layer.attn_norm, layer.ffn_norm):
            saved.append((owner, "out_dtype", owner.out_dtype))
            owner.out_dtype = torch.float32
        for lin in (layer.attn.qkv, layer.attn.o, layer.mlp.gate_up, layer.mlp.down):
            saved.append((lin, "in_dtype", lin.in_dtype))
            lin.in_dtype = torch.float32

    def undo():
        for owner, name, value in saved:
            setattr(owner, name, value)
    return undo


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "granite", "smollm3"])
def test_decode_with_an_adapter_runs_the_fused_stack_as_the_layers_op_by_op(quantized, arch):
    """A decode step with an adapter on goes through every layer in one C++ call where the library has
    the terms (hk_stack_forward_lora), its logits those of the layers op by op with f32 activations
    within f32 rounding (and the 8-bit activations' codes that rounding flips); qwen2: q|k|v's bias
    comes before the term; gemma3: q/k norms after it, post-norms after o's and down's; smollm3: a NoPE
    layer (rot 0: no rope, its term as any other's). On the torch tier there is no such stack: op by op."""
    model, cfg, base = quantized(arch)
    if model.lora_stack is None:
        assert not native.has("lora") or model.stack is None
        pytest.skip("no fused LoRA stack at this tier")
    a, b = prompt(cfg.vocab_size, 5, seed=4), prompt(cfg.vocab_size, 3, seed=5)
    steps = [{"a": (a, 1.0)}, {"b": (b, 0.5)}, {"a": ([7], 1.0), "b": ([9], 0.5)}, {"a": ([11], 1.0), "b": ([13], 0.5)}]
    stack, undo = model.lora_stack, _f32_ops(model)
    done = _stack_runs(model)
    try:
        fused = _steps(model, cfg, steps)
        model.lora_stack = None
        ops = _steps(model, cfg, steps)
    finally:
        model.lora_stack = stack
        del stack.run
        undo()
    assert done and all(n == cfg.num_layers for n in done)
    errs = sorted(rel_err(g[i], r[i]) for got, ref in zip(fused, ops) for seq in got for g, r in [(got[seq], ref[seq])]
                  for i in range(len(g)))
    # measured (avx512, avx2): most rows 5e-8 .. 1e-6 (f32 rounding: sums in another order, torch's norm,
    # rope and silu); a few up to 1e-3, where an input rounded the other way takes the neighbouring 8-bit
    # code (that row alone, at any position). A random adapter as large as the weights (alpha / rank 2)
    # amplifies both: median 2e-5, max 7e-3
    assert errs[len(errs) // 2] < 2e-6 and errs[-1] < 1e-2, errs
    plain = _steps(base, cfg, steps)  # teeth: the adapter moves the logits far more than that
    assert min(rel_err(got[seq], ref[seq]) for got, ref in zip(fused, plain) for seq in got) > 1e-2


def test_olmo2_with_an_adapter_runs_op_by_op(quantized):
    """csrc/lora_layer.h norms q and k per head (olmo2 norms whole projections): the layers op by op with an
    adapter on."""
    model, _, _ = quantized("olmo2")
    assert model.lora_stack is None


def test_rows_of_one_decode_step_take_their_own_scales(quantized):
    """Two sequences in one fused decode step, one at scale 1 and one at 0: the second's logits are the
    base model's bit for bit (no term computed for its row), the first's those of a step where both are at
    1; and the same bits on one thread as on several."""
    model, cfg, base = quantized("llama")
    if model.lora_stack is None:
        pytest.skip("no fused LoRA stack at this tier")
    # a: 8 rows in one step, enough work for q|k|v's term to split over the threads (csrc/lora_layer.h)
    a, b = prompt(cfg.vocab_size, 8, seed=6), prompt(cfg.vocab_size, 4, seed=7)
    first = [{"a": (a, 1.0)}, {"b": (b, 0.0)}]
    done = _stack_runs(model)
    try:
        steps = _steps(model, cfg, [*first, {"a": ([5], 1.0), "b": ([6], 0.0)}])
        both = _steps(model, cfg, [*first, {"a": ([5], 1.0), "b": ([6], 1.0)}])[-1]
    finally:
        del model.lora_stack.run
    assert done[-1] == cfg.num_layers
    mixed = steps[-1]
    plain = _steps(base, cfg, [*first, {"a": ([5], 1.0), "b": ([6], 0.0)}])[-1]
    assert torch.equal(mixed["b"], plain["b"])
    assert torch.equal(mixed["a"], both["a"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the threads split the terms' rank columns and outputs, never a sum
    try:
        alone = _steps(model, cfg, [*first, {"a": ([5], 1.0), "b": ([6], 0.0)}])
    finally:
        torch.set_num_threads(threads)
    assert threads == 1 or all(torch.equal(x[seq], y[seq]) for x, y in zip(alone, steps) for seq in x)
    assert rel_err(both["b"], plain["b"]) > 1e-2  # teeth: the adapter moves b's logits at scale 1
