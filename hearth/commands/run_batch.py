"""`hearth run-batch -i IN.jsonl -o OUT.jsonl [MODEL ...]`: an OpenAI batch file answered in this
process, as `vllm run-batch`: each line goes through the server's own route (hearth.api.inprocess),
so its checks, tool layer and errors are `hearth serve`'s; the engine batches the lines it holds at
once. Results are written in the input's order as they come, so an interrupted run keeps its head."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections import Counter

from hearth.commands import serve
from hearth.errors import HearthError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--input-file", required=True, metavar="FILE",
                   help="the requests, one a line: {\"custom_id\", \"method\": \"POST\", \"url\", \"body\"} "
                        "(OpenAI's batch input; url /v1/chat/completions, /v1/completions, /v1/embeddings, "
                        "/v1/responses, or a reranker's /v1/rerank and /v1/score); -: stdin")
    p.add_argument("-o", "--output-file", required=True, metavar="FILE",
                   help="the results, one a line in the input's order (OpenAI's batch output); -: stdout")
    serve.add_arguments(p, listen=False)


def main(args: argparse.Namespace) -> int:
    from hearth.api.app import create_app
    from hearth.api.batch_file import read_lines
    from hearth.commands.logs import configure_logging
    from hearth.commands.serve_models import build_pool
    from hearth.config import EngineConfig

    configure_logging(args.log_level)
    if args.output_file != "-" and args.input_file != "-" and _same_file(args.input_file, args.output_file):
        raise HearthError(f"--output-file {args.output_file} is the input file; name another")
    lines = read_lines(_read(args.input_file), args.input_file)  # every line checked before a model loads
    config = serve.server_config(args)
    EngineConfig(**serve.engine_args(args))
    where = "stdout" if args.output_file == "-" else args.output_file
    with _output(args.output_file) as out:  # opened before the load: a bad path costs no load
        if not lines:  # as vLLM's: an empty output
            print(f"hearth: {args.input_file} holds no requests; {where} is empty", file=sys.stderr)
            return 0
        args.max_queued = UNQUEUED  # no 429 to a client that cannot retry: the lines in flight are the bound
        pool = build_pool(args)
        pool.preload()
        app = create_app(pool, config)
        try:
            statuses = asyncio.run(answer(app, lines, out, 2 * args.max_num_seqs))
        except BrokenPipeError:  # stdout's reader left (`| head`): hearth.cli ends quietly
            raise
        except OSError as e:
            raise HearthError(f"--output-file {args.output_file}: {e.strerror or e}") from None
    failed = sum(n for s, n in statuses.items() if s != 200)
    print(f"hearth: {len(lines)} requests answered to {where}" + (
        f"; {failed} of them with an error ({_counts(statuses)})" if failed else ""), file=sys.stderr)
    return 0


UNQUEUED = 1 << 40
"""run-batch's --max-queued: an engine never refuses a line's requests (its `n` may be many)."""


async def answer(app, lines, out, concurrency: int) -> Counter:
    """Every line through the app, `concurrency` lines at a time (a line's task made only when one
    ends: a long file costs no memory up front), each result written once those before it are ->
    how many got each status (0: no answer). A failed write ends every line in flight first."""
    from tqdm import tqdm

    from hearth.api.batch_file import error_row, result_row
    from hearth.api.inprocess import post

    statuses: Counter = Counter()
    gate, done, tasks, failed = asyncio.Semaphore(concurrency), {}, set(), []
    written = 0
    bar = tqdm(total=len(lines), unit="req", desc="run-batch", file=sys.stderr)

    async def one(i: int) -> None:
        nonlocal written
        line = lines[i]
        try:
            try:
                status, body = await post(app, line.url, line.body)
                done[i] = result_row(line, status, body)
            except Exception as e:  # the route failed past its 500 (an app error re-raised): a row saying so
                status, done[i] = 0, error_row(line, f"{type(e).__name__}: {e}")
        finally:
            gate.release()
        statuses[status] += 1
        bar.update()
        try:
            while written in done:
                out.write(json.dumps(done.pop(written)) + "\n")
                written += 1
            out.flush()
        except OSError as e:
            failed.append(e)
            raise

    async with app.router.lifespan_context(app):
        try:
            for i in range(len(lines)):
                await gate.acquire()
                if failed:
                    break
                task = asyncio.create_task(one(i))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks)
        finally:  # a failure, or Ctrl-C: no line still runs when the pool closes
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            bar.close()
    return statuses


def _counts(statuses: Counter) -> str:
    return ", ".join(f"{n} x {s or 'no answer'}" for s, n in sorted(statuses.items()) if s != 200)


def _read(path: str) -> list[str]:
    if path == "-":
        return sys.stdin.read().removeprefix("\ufeff").splitlines()
    if path.startswith(("http://", "https://")):  # vLLM's run-batch fetches one; hearth reads files
        raise HearthError(f"--input-file {path}: a URL; download it and give the file (or - for stdin)")
    try:
        with open(path, encoding="utf-8-sig") as f:  # a BOM (Windows editors, PowerShell 5) was line 1's "not JSON"
            return f.read().splitlines()
    except OSError as e:
        raise HearthError(f"--input-file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise HearthError(f"--input-file {path}: not UTF-8 text") from None


def _same_file(a: str, b: str) -> bool:
    with contextlib.suppress(OSError):
        return os.path.samefile(a, b)
    return False


@contextlib.contextmanager
def _output(path: str):
    if path == "-":
        yield sys.stdout
        return
    try:
        f = open(path, "w", encoding="utf-8")
    except OSError as e:
        raise HearthError(f"--output-file {path}: {e.strerror}") from None
    try:
        yield f
    except BaseException:
        with contextlib.suppress(OSError):  # the failure in flight is the one to tell
            f.close()
        raise
    try:
        f.close()
    except OSError as e:  # the last rows' flush
        raise HearthError(f"--output-file {path}: {e.strerror or e}") from None
