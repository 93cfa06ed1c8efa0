"""`hearth eval perplexity MODEL [--kv-cache-dtype D] [--ctx N] [--text FILE]`: perplexity the way
llama.cpp's `llama-perplexity` computes it: the text is cut into non-overlapping windows of ctx
tokens (at most the model's context, as `run --ctx`) (the first token of each replaced by BOS when the model uses one), each window is run from an
empty cache, and the second half of each window is scored (every token there sees at least ctx/2
tokens before it). Prints the running perplexity per window and the final estimate +/- its standard
error. The windows run through the engine's model runner and KV cache, with the chosen KV codec, so
the number measures KV-cache quantization. Default text: a public-domain novel shipped in
hearth/data/perplexity."""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from hearth.commands.threads_flag import THREADS_HELP, thread_count
from hearth.config import DEFAULT_MODEL
from hearth.errors import HearthError
from hearth.formats.kv import SERVED_KV

DEFAULT_TEXT = Path(__file__).resolve().parent.parent / "data" / "perplexity" / "persuasion.txt"
LOGIT_ROWS = 128
"""Rows of logits computed at once (a 262k-vocab row is 1 MB in f32)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help=f"catalog name, path to a .gguf file, or org/repo:file.gguf (default: {DEFAULT_MODEL})")
    p.add_argument("--kv-cache-dtype", default="auto",
                   help=f"KV cache format: auto (f16), {', '.join(SERVED_KV)}")
    p.add_argument("--ctx", "-c", "--ctx-size", type=int, default=512,
                   help="window (context) length in tokens, at most the model's; 0: the model's own, as "
                        "llama-perplexity's -c 0; -c/--ctx-size: llama-perplexity's spelling (default: %(default)s)")
    p.add_argument("--text", "-f", "--file", help="UTF-8 text file to score (default: the text hearth ships; "
                                                  "-f/--file: llama-perplexity's spelling)")
    p.add_argument("--chunks", type=int, default=-1, metavar="N",
                   help="score only the first N windows; -1 (llama-perplexity's spelling) or 0: all (default: all)")
    p.add_argument("--batch", "-b", "--batch-size", type=int, default=512,
                   help="tokens per forward pass, at least 1; -b/--batch-size: llama-perplexity's spelling "
                        "(default: %(default)s)")
    p.add_argument("--block-size", type=int, default=None, help="KV block size, at least 1 (default: the format's)")
    p.add_argument("--threads", type=thread_count, default=0, help=f"CPU threads; {THREADS_HELP} (default: 0)")


@dataclass(slots=True)
class Perplexity:
    nll: list[float] = field(default_factory=list)
    """Negative log-likelihood of every scored token, in order."""
    windows: int = 0

    @property
    def value(self) -> float:
        return math.exp(sum(self.nll) / len(self.nll))

    @property
    def stderr(self) -> float:
        """llama.cpp's estimate: ppl * sqrt(var(nll) / (n - 1))."""
        n = len(self.nll)
        if n < 2:
            return float("nan")
        mean = sum(self.nll) / n
        var = max(sum(x * x for x in self.nll) / n - mean * mean, 0.0)
        return self.value * math.sqrt(var / (n - 1))


def windows(tokens: list[int], ctx: int, bos: int | None, limit: int = 0) -> list[list[int]]:
    """Whole windows of ctx tokens, at most limit of them (0 or negative: all, as llama-perplexity's -1)."""
    n = len(tokens) // ctx
    if limit > 0:
        n = min(n, limit)
    out = []
    for w in range(n):
        win = list(tokens[w * ctx:(w + 1) * ctx])
        if bos is not None:
            win[0] = bos
        out.append(win)
    return out


def score_window(runner, window: list[int], rid: str, batch: int, finished: list[str]) -> list[float]:
    """Run one window from an empty cache; NLL of tokens [ctx/2 + 1, ctx) given what precedes them."""
    import torch

    from hearth.runner.messages import ScheduledSequence, SchedulerOutput
    from hearth.sampling_params import SamplingParams

    ctx, bs = len(window), runner.block_size
    first = ctx // 2
    blocks = list(range(-(-ctx // bs)))
    params = SamplingParams(temperature=0)
    nll = []
    for p in range(0, ctx, batch):
        chunk = window[p:p + batch]
        seq = ScheduledSequence(rid, chunk, p, blocks, False, params, [], state_slot=0)  # a recurrent model's (qwen35)
        hidden = runner.forward(SchedulerOutput([seq], finished if p == 0 else []))  # [n, hidden]
        lo, hi = max(first, p), min(p + len(chunk), ctx - 1)  # positions whose next token is scored
        for r0 in range(lo, hi, LOGIT_ROWS):
            r1 = min(r0 + LOGIT_ROWS, hi)
            with torch.inference_mode():
                logits = runner.model.compute_logits(hidden[r0 - p:r1 - p]).float()
            target = torch.tensor(window[r0 + 1:r1 + 1])
            lp = torch.log_softmax(logits, -1).gather(1, target[:, None])[:, 0]
            nll.extend((-lp).tolist())
    return nll


def runner_for(llm, kv_cache_dtype: str, ctx: int, max_num_seqs: int = 1, block_size: int = 0):
    """A model runner over llm's loaded model with its own KV cache in another format, sized for
    max_num_seqs sequences of ctx tokens (the model is shared, not copied)."""
    from hearth.kvstore.codecs import get_codec
    from hearth.runner.model_runner import ModelRunner

    codec = get_codec(kv_cache_dtype)
    bs = codec.block_size(block_size or None)
    blocks = max_num_seqs * -(-ctx // bs)
    return ModelRunner(llm.model, llm.model_config, blocks, bs, codec, max_num_seqs=max_num_seqs)


def greedy(runner, prompt: list[int], n: int, rid: str = "greedy", feed: list[int] | None = None) -> list[int]:
    """n greedy tokens after prompt, one decode step at a time through the runner's KV cache. With
    feed (n reference tokens), feed[i] goes back in instead of the pick (teacher forcing): the picks
    then say at which steps this runner ranks the reference's token first, and a near-tie costs one
    position rather than every token after it."""
    from hearth.runner.messages import ScheduledSequence, SchedulerOutput
    from hearth.sampling_params import SamplingParams

    params = SamplingParams(temperature=0)
    blocks = list(range(-(-(len(prompt) + n) // runner.block_size)))
    out, todo, pos = [], list(prompt), 0
    while len(out) < n:
        seq = ScheduledSequence(rid, todo, pos, blocks, True, params, [], state_slot=0)  # one request at a time
        token = runner.execute(SchedulerOutput([seq])).sampled[rid].token_id
        pos += len(todo)
        out.append(token)
        todo = [token if feed is None else feed[len(out) - 1]]
    runner.execute(SchedulerOutput([], [rid]))
    return out


def perplexity(runner, tokenizer, tokens: list[int], ctx: int, batch: int = 512, limit: int = 0,
               progress=None) -> Perplexity:
    """Score `tokens` with `runner` (its KV codec) in windows of ctx tokens."""
    bos = tokenizer.bos_id if tokenizer.add_bos else None
    result, finished = Perplexity(), []
    for w, win in enumerate(windows(tokens, ctx, bos, limit)):
        rid = f"perplexity-{w}"
        result.nll.extend(score_window(runner, win, rid, batch, finished))
        finished = [rid]  # the runner drops the window's staging state on the next call
        result.windows += 1
        if progress is not None:
            progress(result)
    return result


_CHECKS = {"ctx": (lambda v: v == 0 or v >= 16, "at least 16, or 0 for the model's own"),
           "chunks": (lambda v: v >= -1, "a number of windows, or -1 or 0 for all"),
           "batch": (lambda v: v >= 1, "at least 1"), "block_size": (lambda v: v >= 1, "at least 1")}
"""Flag -> (what a value must pass, what it must be): checked before the text is read or any model loads."""


def check_flags(args: argparse.Namespace) -> None:
    for name, (ok, what) in _CHECKS.items():
        value = getattr(args, name)
        if value is not None and not ok(value):
            raise HearthError(f"--{name.replace('_', '-')} must be {what}, not {value}")


def main(args: argparse.Namespace) -> int:
    from hearth.kvstore.codecs import get_codec
    from hearth.llm import LLM
    from hearth.loader.context import context_to_run
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.loader.resolve import resolve_model
    from hearth.memory.gguf_shape import shape_from_gguf

    check_flags(args)
    text_path = Path(args.text) if args.text else DEFAULT_TEXT
    try:
        text = text_path.read_text(encoding="utf-8")
    except OSError as e:  # was "cannot read text X: [Errno 2] No such file or directory: 'X'"
        raise HearthError(f"--text {text_path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise HearthError(f"--text {text_path}: not UTF-8 text") from None
    get_codec(args.kv_cache_dtype).block_size(args.block_size)  # a bad format fails before loading
    # as `run --ctx`: past the model's own context, that one, said in one line (hearth.loader.context);
    # read from the header first, so that no cache is sized for the longer window
    ctx = context_to_run(args.ctx, shape_from_gguf(GGUFFile(resolve_model(args.model))).context_length)
    # the LLM's own cache goes unused (runner_for brings one in the chosen format): one window's blocks,
    # the least that keeps the context at ctx (the engine lowers a context its cache cannot hold)
    llm = LLM(args.model, progress=True, threads=args.threads, max_model_len=ctx, max_num_seqs=1,
              block_size=16, num_kv_blocks=-(-ctx // 16))
    runner = runner_for(llm, args.kv_cache_dtype, ctx, block_size=args.block_size or 0)
    codec, bs = runner.codec, runner.block_size
    tokens = llm.tokenizer.encode(text, parse_special=False)
    n = len(tokens) // ctx
    if n < 1:
        raise HearthError(f"{text_path} has {len(tokens)} tokens: fewer than one window of {ctx}")
    if args.chunks > 0:
        n = min(n, args.chunks)
    print(f"perplexity: {len(tokens)} tokens of {text_path.name}; {n} windows of {ctx} tokens, scoring the "
          f"second half of each; KV cache {codec.name} (blocks of {bs})", file=sys.stderr)
    t0 = time.perf_counter()

    def progress(r: Perplexity) -> None:
        if r.windows == 1:
            per = time.perf_counter() - t0
            print(f"perplexity: {per:.1f} s per window, ETA {per * (n - 1):.0f} s", file=sys.stderr)
        print(f"[{r.windows}]{r.value:.4f},", end="", flush=True)

    r = perplexity(runner, llm.tokenizer, tokens, ctx, args.batch, n, progress)
    print()
    print(f"Final estimate: PPL = {r.value:.4f} +/- {r.stderr:.5f}  ({len(r.nll)} tokens scored, "
          f"KV {codec.name}, ctx {ctx}, {time.perf_counter() - t0:.0f} s)")
    return 0
