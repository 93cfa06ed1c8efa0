"""Image encoding side by side: hearth's VisionEncoder.encode and llama.cpp's (llama-mtmd-cli's "mtmd batch
encoding done in N ms") on the same random mmproj GGUF at real models' shapes, 2 threads each, repeats interleaved.

No real vision weights exist on the package index: the towers are random weights at the real shapes,
written as llama.cpp's converter writes them (tests/mmproj_factory.py's layout; F16 matrices as real mmproj
files ship, or Q8_0), and a one-layer random llama LM of the projector's output width (mtmd checks that
the LM's n_embd equals it). Random weights cost the same FLOPs as real ones.

    /work/main/.venv/bin/python benchmarks/bench_vision.py                      # every shape, F16, 3 repeats
    /work/main/.venv/bin/python benchmarks/bench_vision.py --shapes smolvlm-256m --repeats 5 --qtype Q8_0
    ... --profile        # hearth alone: where one encode's time goes (torch profiler, by op)

llama-mtmd-cli comes from benchmarks/setup_llama_mtmd.sh (the same llama-cpp-python 0.3.36 sdist as the
other benchmarks); --llama-mtmd PATH overrides, --engines hearth runs hearth alone. Each llama.cpp repeat
is one process (load, encode one image, one token), timed by its own log line; hearth's encoder is loaded
once and warmed up once. GFLOP/s counts the tower's and projector's matmuls (2 per multiply-add: linears,
attention's two products, the patch convolution); the peak is torch's bf16 matmul on this machine with
the same threads (a 2048^3 product, the tiles the linears of many rows run on), timed in one thread's CPU
time and multiplied by the threads: the cores' figure, which a busy host does not move."""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Shape:
    projector: str
    hidden: int
    ffn: int
    blocks: int
    heads: int
    image: int
    patch: int
    lm_hidden: int
    merge: int  # idefics3's pixel shuffle / gemma3's pool side / Qwen's merge unit side
    window: int = 0  # Qwen2.5-VL: patches per attention window side (0: every block attends to the whole image)
    full_every: int = 0  # Qwen2.5-VL: every n-th block attends to the whole image (clip.vision.n_wa_pattern)

    @property
    def patches(self) -> int:
        return (self.image // self.patch) ** 2


SHAPES = {  # the vision towers of SmolVLM-256M-Instruct, gemma-3-4b-it (SigLIP-So400m), Qwen2.5-VL-3B-Instruct
    "smolvlm-256m": Shape("idefics3", 768, 3072, 12, 12, 512, 16, 576, 4),
    "gemma3-4b": Shape("gemma3", 1152, 4304, 27, 16, 896, 14, 2560, 4),
    # its vision_config: depth 32, hidden 1280, 16 heads, intermediate 3420, window 112 px, fullatt_block_indexes
    # 7, 15, 23, 31, out_hidden_size 2048; a 448 x 448 image: 32 x 32 patches, 256 LM rows (smart_resize keeps it)
    "qwen2.5-vl-3b": Shape("qwen2.5vl_merger", 1280, 3420, 32, 16, 448, 14, 2048, 2, window=8, full_every=8),
}


def gflop(s: Shape) -> float:
    """Multiply-adds x 2 of one image: patch conv, per block q|k|v|o + the MLP + attention's QK^T and PV (within
    windows where a block has them), projector."""
    n, h = s.patches, s.hidden
    if s.projector == "qwen2.5vl_merger":  # two temporal frames, SwiGLU, windows, the merger's two linears
        full = s.blocks // s.full_every
        attn = 2 * n * h * (full * n + (s.blocks - full) * s.window ** 2)
        wide = h * s.merge ** 2
        merger = (n // s.merge ** 2) * wide * (wide + s.lm_hidden)
        return 2 * (n * 3 * 2 * s.patch ** 2 * h + s.blocks * n * (4 * h * h + 3 * h * s.ffn) + attn + merger) / 1e9
    conv = n * 3 * s.patch ** 2 * h
    block = n * (4 * h * h + 2 * h * s.ffn) + 2 * n * n * h
    proj = (n // s.merge ** 2) * (h * s.merge ** 2 if s.projector == "idefics3" else h) * s.lm_hidden
    return 2 * (conv + s.blocks * block + proj) / 1e9


def write_mmproj(path: Path, s: Shape, qtype: str, seed: int = 0) -> None:
    """Random weights as convert_hf_to_gguf.py --mmproj writes SigLIP towers: embeddings and 1-d tensors F32,
    matrices in qtype (a row that is no whole Q8_0 block stays F16), gemma3's input projection F16 [vision, lm]."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_clip_has_vision_encoder(True)
    w.add_clip_projector_type(s.projector)
    w.add_vision_projection_dim(s.lm_hidden)
    w.add_vision_image_size(s.image)
    w.add_vision_patch_size(s.patch)
    w.add_vision_embedding_length(s.hidden)
    w.add_vision_feed_forward_length(s.ffn)
    w.add_vision_block_count(s.blocks)
    w.add_vision_head_count(s.heads)
    w.add_vision_attention_layernorm_eps(1e-6)
    w.add_vision_image_mean([0.5] * 3)
    w.add_vision_image_std([0.5] * 3)
    w.add_vision_use_gelu(True)
    if s.projector == "idefics3":
        w.add_vision_projector_scale_factor(s.merge)
        w.add_vision_preproc_image_size(s.image)  # one global image, no tiles (llama.cpp slices above it)

    def matrix(rows, cols):
        return (rng.standard_normal((rows, cols), np.float32) / np.sqrt(cols)).astype(np.float32)

    def vec(n, one=False):
        return (rng.standard_normal(n, np.float32) * 0.1 + (1.0 if one else 0.0)).astype(np.float32)

    def add(name, value):
        if value.ndim != 2 or "embd" in name:
            w.add_tensor(name, value)
        elif qtype == "F16" or value.shape[-1] % 32:
            w.add_tensor(name, value.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(value, Q.Q8_0), raw_dtype=Q.Q8_0)

    h = s.hidden
    w.add_tensor("v.patch_embd.weight", (rng.standard_normal((h, 3, s.patch, s.patch), np.float32)
                                         / np.sqrt(3 * s.patch ** 2)).astype(np.float32))
    w.add_tensor("v.patch_embd.bias", vec(h))
    add("v.position_embd.weight", rng.standard_normal((s.patches, h), np.float32) * 0.1)
    w.add_tensor("v.post_ln.weight", vec(h, True))
    w.add_tensor("v.post_ln.bias", vec(h))
    for i in range(s.blocks):
        p = f"v.blk.{i}."
        for name, (rows, cols) in {"attn_q": (h, h), "attn_k": (h, h), "attn_v": (h, h), "attn_out": (h, h),
                                   "ffn_up": (s.ffn, h), "ffn_down": (h, s.ffn)}.items():
            add(p + name + ".weight", matrix(rows, cols))
            w.add_tensor(p + name + ".bias", vec(rows))
        for ln in ("ln1", "ln2"):
            w.add_tensor(p + ln + ".weight", vec(h, True))
            w.add_tensor(p + ln + ".bias", vec(h))
    if s.projector == "gemma3":
        w.add_tensor("mm.soft_emb_norm.weight", vec(h, True))
        w.add_tensor("mm.input_projection.weight", matrix(h, s.lm_hidden).astype(np.float16))
    else:
        add("mm.model.fc.weight", matrix(s.lm_hidden, h * s.merge ** 2))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_qwen_mmproj(path: Path, s: Shape, qtype: str, seed: int = 0) -> None:
    """Random weights in transformers' Qwen2.5-VL vision state dict, written as tests/mmproj_qwen.py writes a
    tiny one (convert_hf_to_gguf.py --mmproj's layout: the patch embedding's two temporal slices, q / k / v
    apart, the merger as v.post_ln, mm.0, mm.2)."""
    from types import SimpleNamespace

    from tests.mmproj_qwen import write_state
    rng = np.random.default_rng(seed)
    h, f, wide = s.hidden, s.ffn, s.hidden * s.merge ** 2

    def matrix(rows, *cols):
        return (rng.standard_normal((rows, *cols), np.float32) / np.sqrt(np.prod(cols))).astype(np.float32)

    def vec(n, one=False):
        return (rng.standard_normal(n, np.float32) * 0.1 + (1.0 if one else 0.0)).astype(np.float32)

    sd = {"patch_embed.proj.weight": matrix(h, 3, 2, s.patch, s.patch)}
    for i in range(s.blocks):
        p = f"blocks.{i}."
        sd |= {p + "norm1.weight": vec(h, True), p + "norm2.weight": vec(h, True),
               p + "attn.qkv.weight": matrix(3 * h, h), p + "attn.qkv.bias": vec(3 * h),
               p + "attn.proj.weight": matrix(h, h), p + "attn.proj.bias": vec(h)}
        for name, (rows, cols) in {"gate_proj": (f, h), "up_proj": (f, h), "down_proj": (h, f)}.items():
            sd |= {p + f"mlp.{name}.weight": matrix(rows, cols), p + f"mlp.{name}.bias": vec(rows)}
    sd |= {"merger.ln_q.weight": vec(h, True), "merger.mlp.0.weight": matrix(wide, wide), "merger.mlp.0.bias": vec(wide),
           "merger.mlp.2.weight": matrix(s.lm_hidden, wide), "merger.mlp.2.bias": vec(s.lm_hidden)}
    vc = SimpleNamespace(patch_size=s.patch, hidden_size=h, intermediate_size=f, depth=s.blocks, num_heads=s.heads,
                         fullatt_block_indexes=list(range(s.full_every - 1, s.blocks, s.full_every)))
    write_state(path, s.projector, vc, s.lm_hidden, sd, qtype)


WRITERS = {"qwen2.5vl_merger": write_qwen_mmproj}
"""Projector type -> its mmproj writer (write_mmproj for the SigLIP towers)."""


def write_lm(path: Path, s: Shape) -> None:
    """A one-layer random LM of width lm_hidden (mtmd refuses an LM whose n_embd is not the projector's): llama,
    or qwen2vl with M-RoPE for a Qwen projector (mtmd lays out the image's positions for it)."""
    from tests.gguf_factory import write_tiny_gguf
    qwen = s.projector in WRITERS
    head_dim = 128 if qwen else 64  # Qwen2.5-VL-3B's: 16 / 24 / 24 of its 64 rotated pairs
    heads = s.lm_hidden // head_dim
    extra = dict(rope_sections=(16, 24, 24, 0)) if qwen else {}
    write_tiny_gguf(path, "qwen2vl" if qwen else "llama", qtype="F16", layers=1, hidden=s.lm_hidden, heads=heads,
                    kv_heads=heads, head_dim=head_dim, ffn=256, vocab=320, context=8192, chat_template=CHATML, **extra)


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def write_image(path: Path, side: int) -> np.ndarray:
    """A random side x side PNG (both engines resize to the tower's size: this is that size already)."""
    from PIL import Image
    rgb = np.random.default_rng(1).integers(0, 256, (side, side, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(path)
    return rgb


def matmul_peak(threads: int) -> float:
    """The cores' bf16 matmul peak: one thread's 2048^3 torch product in its own CPU time (median of 5; a
    shared host's load does not move it as it moves the wall clock), times `threads`."""
    import torch
    torch.set_num_threads(1)
    a, b = torch.randn(2048, 2048).bfloat16(), torch.randn(2048, 2048).bfloat16()
    a @ b
    times = []
    for _ in range(5):
        t = time.thread_time()
        a @ b
        times.append(time.thread_time() - t)
    torch.set_num_threads(threads)
    return threads * 2 * 2048 ** 3 / statistics.median(times) / 1e9


class Hearth:
    def __init__(self, mmproj: Path, image: Path, threads: int):
        import torch
        torch.set_num_threads(threads)
        from hearth.backends import select
        from hearth.media.images import prepare_image
        from hearth.models.vision import VisionEncoder
        t = time.perf_counter()
        self.enc = VisionEncoder.load(mmproj, select())
        self.load_s = time.perf_counter() - t
        prepared = prepare_image(image.read_bytes(), self.enc.cfg)
        self.pieces = prepared.pixels  # each one a MediaInput's pixels, encoded as the runner encodes them
        self.encode_ms()  # warm-up (first-touch pages, kernel plans)

    def encode_ms(self) -> float:
        t, cpu = time.perf_counter(), time.process_time()
        for piece in self.pieces:
            self.enc.encode(piece)
        self.cpu_ms = (time.process_time() - cpu) * 1e3  # all threads' CPU time: how much the host's load inflated the wall
        return (time.perf_counter() - t) * 1e3


ENCODED = re.compile(r"mtmd batch encoding done in (\d+) ms")  # mtmd-cli encodes an image's chunks as one batch
CHUNKS = re.compile(r"encoding mtmd batch, n_chunks = (\d+)")


def llama_encode_ms(binary: str, lm: Path, mmproj: Path, image: Path, threads: int) -> float:
    """One llama-mtmd-cli process: the sum of its "mtmd batch encoding done in N ms" lines (the image's
    preprocessing and encode; one batch of one chunk here). What it does after (decoding the prompt with the
    random LM) is not timed, and may fail on the random LM without touching the figure."""
    cmd = [binary, "-m", str(lm), "--mmproj", str(mmproj), "--image", str(image), "-p", "describe",
           "-n", "1", "-t", str(threads), "-tb", str(threads), "-c", "8192", "--temp", "0", "--no-warmup"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    log = out.stdout + out.stderr
    found = [int(m) for m in ENCODED.findall(log)]
    if not found:
        raise RuntimeError(f"llama-mtmd-cli failed ({out.returncode}): {log[-2000:]}")
    chunks = [int(m) for m in CHUNKS.findall(log)]
    if chunks != [1]:  # llama.cpp sliced the image (hearth encodes one): the comparison is not like for like
        print(f"  llama-mtmd-cli encoded {chunks} chunks in {found} ms", flush=True)
    return float(sum(found))


def profile(h: Hearth, rows: int = 25) -> str:
    import torch
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for piece in h.pieces:
            h.enc.encode(piece)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--qtype", default="F16", choices=["F16", "Q8_0"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engines", nargs="+", default=["llama.cpp", "hearth"], choices=["llama.cpp", "hearth"])
    ap.add_argument("--llama-mtmd", default=os.environ.get("LLAMA_MTMD_CLI", "/work/llama-mtmd-build/bin/llama-mtmd-cli"))
    ap.add_argument("--workdir", default=None, help="where the GGUFs are written (kept, reused): default a temp dir")
    ap.add_argument("--profile", action="store_true", help="hearth alone: one encode under the torch profiler")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-vision-"))
    work.mkdir(parents=True, exist_ok=True)
    peak = matmul_peak(args.threads)
    print(f"torch bf16 matmul peak: {peak:.0f} GFLOP/s ({args.threads} x one thread's, in CPU time)", flush=True)
    results = {"threads": args.threads, "qtype": args.qtype, "bf16_matmul_peak_gflops": peak, "shapes": {}}
    for name in args.shapes:
        s = SHAPES[name]
        mmproj, lm, image = work / f"{name}-{args.qtype}.mmproj.gguf", work / f"{name}-lm.gguf", work / f"{name}.png"
        if not mmproj.exists():
            WRITERS.get(s.projector, write_mmproj)(mmproj, s, args.qtype)
        if "llama.cpp" in args.engines and not lm.exists():
            write_lm(lm, s)
        write_image(image, s.image)
        work_gf = gflop(s)
        print(f"\n{name}: {s.patches} patches, width {s.hidden}, {s.blocks} blocks, {work_gf:.0f} GFLOP/image", flush=True)
        h = Hearth(mmproj, image, args.threads) if "hearth" in args.engines else None
        if h is not None and args.profile:
            print(profile(h), flush=True)
            continue
        times, hearth_cpu = {e: [] for e in args.engines}, []
        for r in range(args.repeats):  # interleaved: llama.cpp's repeat r, then hearth's
            if "llama.cpp" in args.engines:
                times["llama.cpp"].append(llama_encode_ms(args.llama_mtmd, lm, mmproj, image, args.threads))
            if h is not None:
                times["hearth"].append(h.encode_ms())
                hearth_cpu.append(h.cpu_ms)
            print(f"  repeat {r}: " + ", ".join(f"{e} {t[-1]:.0f} ms" for e, t in times.items())
                  + (f" (hearth's CPU time {h.cpu_ms:.0f} ms)" if h is not None else "") + f", load {os.getloadavg()[0]:.1f}",
                  flush=True)
        row = {"gflop": work_gf}
        for e, t in times.items():
            med = statistics.median(t)
            row[e] = {"ms": t, "median_ms": med, "gflops": work_gf / med * 1e3, "pct_peak": 100 * work_gf / med * 1e3 / peak}
            print(f"  {e:9s} median {med:8.0f} ms  {row[e]['gflops']:6.0f} GFLOP/s  {row[e]['pct_peak']:4.0f}% of peak "
                  f"(runs {', '.join(f'{x:.0f}' for x in t)})", flush=True)
        if hearth_cpu:
            row["hearth"]["cpu_ms"] = hearth_cpu
            print(f"  hearth's CPU time median {statistics.median(hearth_cpu):.0f} ms (both threads)", flush=True)
        if len(times) == 2:
            row["hearth_speedup"] = row["llama.cpp"]["median_ms"] / row["hearth"]["median_ms"]
            print(f"  hearth / llama.cpp speed: {row['hearth_speedup']:.2f}x", flush=True)
        results["shapes"][name] = row
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
