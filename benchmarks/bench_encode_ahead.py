"""What an image costs the other sequences' decode: SmolLM2-135M decodes one text request while a second
request brings an image for a real-shaped random SmolVLM-256M tower (bench_vision.py's mmproj, 64 rows,
lm_hidden 576 = SmolLM2's width); the text request's largest gap between two tokens, and the image request's
time to its first token, with the image encoded inside the step (ModelRunner.encode_ahead False: before)
and beside the steps (True), interleaved. The in-step rows' median gap is its one gap (the text request
ends when the image request's first token comes).

    PYTHONPATH=$PWD /work/main/.venv/bin/python benchmarks/bench_encode_ahead.py [--repeats 2]

(gemma3-4b's tower needs an LM 2560 wide: only smolvlm-256m pairs with SmolLM2 here.)"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def one(llm, ahead: bool, tag: int, pixels, rows: int, with_text: bool) -> tuple[float, float, float]:
    """(the text request's max and median inter-token gaps s, the image request's time to first token s)."""
    from hearth import SamplingParams
    from hearth.media.inputs import MediaInput
    engine, runner = llm.engine, llm.engine.runner
    runner.encode_ahead = ahead
    runner.set_vision(runner.vision)  # a fresh MediaRows in this mode, nothing encoded
    engine.add_request([tag + 200] * 8 + [0] * rows, SamplingParams(temperature=0, max_tokens=1),
                              media=[MediaInput(8, rows, bytes([tag, 255]) * 4, pixels)])  # the worker thread's first encode
    while engine.has_unfinished():
        engine.step()
    engine.scheduler.kv.pool.reset_prefix_cache()
    text = None
    if with_text:
        text = engine.add_request([1, 2, 3] * 8, SamplingParams(temperature=0, max_tokens=400, ignore_eos=True))
        for _ in range(5):
            engine.step()
    ids = [tag + 10] * 8 + [0] * rows + [5] * 8
    t0 = time.perf_counter()
    img = engine.add_request(ids, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                             media=[MediaInput(8, rows, bytes([tag]) * 8, pixels)])
    last, gaps, ttft = time.perf_counter(), [0.0], None
    while engine.has_unfinished():
        outs = engine.step()
        now = time.perf_counter()
        for o in outs:
            if o.request_id == text and o.new_token_ids:
                gaps.append(now - last)
                last = now
            if o.request_id == img and o.new_token_ids and ttft is None:
                ttft = now - t0
        if ttft is not None and text is not None:
            engine.abort(text)
    return max(gaps), sorted(gaps)[len(gaps) // 2], ttft


def main() -> None:
    import bench_vision as bv

    from hearth import LLM
    from hearth.media.images import prepare_image
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--model", default=str(Path.home() / ".cache/hearth/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="encode-ahead-"))
    s = bv.SHAPES["smolvlm-256m"]
    bv.write_mmproj(d / "mmproj.gguf", s, "F16")
    bv.write_image(d / "image.png", s.image)
    llm = LLM(args.model, mmproj=str(d / "mmproj.gguf"), max_num_seqs=4, progress=False)
    prepared = prepare_image((d / "image.png").read_bytes(), llm.vision_config)
    pixels = prepared.pixels[0] if prepared.pixels.ndim == 4 else prepared.pixels
    tag = 0
    modes = {"in-step": False, "ahead": True}
    for r in range(args.repeats):
        for with_text in (True, False):
            for name, ahead in modes.items():
                tag += 1
                gap, median, ttft = one(llm, ahead, tag, pixels, prepared.num_embeds, with_text)
                what = "beside a decode" if with_text else "alone          "
                print(f"repeat {r} {what} {name:18}: text gaps max {gap:6.2f} s median {median:5.3f} s  "
                      f"image TTFT {ttft:6.2f} s", flush=True)

if __name__ == "__main__":
    main()
