"""LLM.generate's run: each prompt's requests (n of them, one per sampled answer) added to the engine, stepped
until all end, their deltas gathered into RequestOutputs; a failed step (or ^C) aborts the ones left."""

from __future__ import annotations

import functools
import sys
from contextlib import contextmanager
from dataclasses import replace

from hearth.llm_logprobs import as_vllm
from hearth.outputs import CompletionOutput, RequestOutput
from hearth.sampling_params import SamplingParams


@contextmanager
def prompts_bar(use_tqdm, total: int):
    """vLLM's use_tqdm: a bar of finished prompts (True: tqdm's, on a terminal only, as the loading bar; a
    callable: that class, anywhere) or None."""
    if not use_tqdm or use_tqdm is True and not sys.stderr.isatty():
        yield None
        return
    if use_tqdm is True:
        from tqdm import tqdm as use_tqdm
    bar = use_tqdm(total=total, desc="Processed prompts", unit="prompt", leave=False)
    try:
        yield bar
    finally:
        bar.close()


def run_requests(engine, request_ids, encoded: list[tuple[str | None, list[int]]], params: list[SamplingParams],
                 media: list[tuple] | None = None, bar=None) -> list[RequestOutput]:
    """generate's work, under the engine's lock: each (text, ids) runs with its params (and media).
    request_ids: the LLM's counter, so ids never collide in the engine across calls. bar: updated by 1 as
    each prompt's answers are all in (prompts_bar)."""
    results, children, p_of, ranks = [], {}, {}, {}
    try:
        for i, ((text, ids), p) in enumerate(zip(encoded, params)):
            m = media[i] if media else ()
            result = RequestOutput(str(next(request_ids)), text, ids, [])
            results.append(result)
            for j in range(p.n):
                child = p if p.seed is None else replace(p, seed=p.seed + j)
                # the first child's prompt logprobs are the result's: the rest hit its prefix
                if j and p.prompt_logprobs is not None:
                    child = replace(child, prompt_logprobs=None)
                rid = engine.add_request(ids, child, request_id=f"{result.request_id}-{j}", checked=True,
                                         media=m)
                result.outputs.append(CompletionOutput(j, "", [], logprobs=[] if p.logprobs is not None else None))
                children[rid] = (result, result.outputs[j])
                p_of[rid] = p
        while engine.has_unfinished():
            for out in engine.step():
                if out.error is not None:  # the others are aborted below
                    raise out.error
                result, comp = children[out.request_id]
                if comp.index == 0:  # the prompt's, as the server counts it: siblings hit the first's blocks
                    result.num_cached_tokens = out.num_cached_tokens
                comp.token_ids.extend(out.new_token_ids)
                if p_of[out.request_id].detokenize:  # vLLM's detokenize=False: token ids only
                    comp.text += out.new_text
                if out.new_logprobs is not None:
                    comp.logprobs.extend(out.new_logprobs)
                    ranks.setdefault(out.request_id, []).extend(out.new_ranks or [None] * len(out.new_logprobs))
                if out.prompt_logprobs is not None and result.prompt_logprobs is None:  # every child's are the same
                    result.prompt_logprobs, result.prompt_ranks = out.prompt_logprobs, out.prompt_ranks
                if out.embedding is not None:
                    result.embedding = out.embedding
                if out.finished:
                    comp.finish_reason, comp.stop_reason = out.finish_reason, out.stop_reason
                    result.finished = all(c.finish_reason for c in result.outputs)
                    if result.finished and bar is not None:
                        bar.update(1)
        decode = functools.lru_cache(maxsize=None)(lambda t: engine.tokenizer.decode([t]))
        for result in results:  # vLLM's Logprob records, each token's text decoded once
            as_vllm(result, {c.index: ranks.get(f"{result.request_id}-{c.index}") for c in result.outputs}, decode)
    except BaseException:  # a failed step (or ^C): the requests left would join the next call's
        for rid in children:
            engine.abort(rid)
        raise
    return results
