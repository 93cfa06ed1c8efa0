"""`hearth run [MODEL] [PROMPT]`: stream a chat answer to the terminal (interactive without PROMPT),
in the manner of `ollama run`."""

from __future__ import annotations

import argparse
import sys
import time

from hearth.config import DEFAULT_MODEL, DEVICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help=f"catalog name, path to a .gguf file, or org/repo:file.gguf (default: {DEFAULT_MODEL})")
    p.add_argument("prompt", nargs="?", help="answer this prompt and exit (default: interactive chat)")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: all cores)")
    p.add_argument("--device", default="auto", choices=DEVICES, help="cpu, torch (the reference) or cuda (default: %(default)s)")
    p.add_argument("--ctx", type=int, default=4096, help="context length in tokens (default: %(default)s)")
    p.add_argument("--verbose", action="store_true", help="print timings after each answer")


def main(args: argparse.Namespace) -> int:
    from hearth.llm import LLM
    from hearth.sampling_params import SamplingParams

    llm = LLM(args.model, threads=args.threads, max_model_len=args.ctx, max_num_seqs=1, device=args.device)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens,
                            seed=args.seed)
    history = [{"role": "system", "content": args.system}] if args.system else []
    if args.prompt:
        _answer(llm, history, args.prompt, params, args.verbose)
        return 0
    interactive = sys.stdin.isatty()
    if interactive:
        print("Send a message (/bye or Ctrl-D to quit, /clear to forget the conversation)", file=sys.stderr)
    while True:
        try:
            line = input(">>> " if interactive else "")
        except EOFError:
            return 0
        text = line.strip()
        if text in ("/bye", "/exit", "/quit"):
            return 0
        if text == "/clear":
            history = history[:1] if args.system else []
            continue
        if text:
            _answer(llm, history, text, params, args.verbose)


def _answer(llm, history: list[dict], text: str, params, verbose: bool) -> None:
    history.append({"role": "user", "content": text})
    ids = llm.encode_chat(history)
    start, first, parts, n = time.perf_counter(), None, [], 0
    try:
        for out in llm.stream({"prompt_token_ids": ids}, params):
            if first is None:
                first = time.perf_counter()
            n += len(out.new_token_ids)
            parts.append(out.new_text)
            sys.stdout.write(out.new_text)
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    print()
    history.append({"role": "assistant", "content": "".join(parts)})
    if verbose and first is not None:
        end = time.perf_counter()
        rate = (n - 1) / (end - first) if n > 1 and end > first else 0.0
        print(f"prompt: {len(ids)} tokens, {first - start:.2f}s to first token; "
              f"answer: {n} tokens, {rate:.1f} tok/s", file=sys.stderr)
