"""One answer of `hearth run`: the prompt checked against the context, the answer streamed to stdout
and added to the chat's history, and with --verbose its timings (and speculation's counts)."""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from hearth.errors import (HearthError, MaxTokensTooLargeError, PromptTooLongError, can_raise_context, check_room,
                           too_long)

DEFAULT_MAX_TOKENS = 1024
# how an answer may end early (answer)
INTERRUPTED_ANSWER, CONTEXT_FULL, MAX_TOKENS = "interrupted", "context full", "max tokens"


def answer(llm, history: list[dict] | None, text: str, params, verbose: bool, note: str | None = None,
           until_full: bool = False, images: list[dict] = ()) -> str | None:
    """Stream the answer to `text` and add both to `history` (None: complete `text` as it is, no
    chat); INTERRUPTED_ANSWER when Ctrl-C stopped it, CONTEXT_FULL when the context's end did, MAX_TOKENS
    when max_tokens did, else None. A prompt that does not fit the context raises (naming --ctx) and leaves
    `history` as it was. `note` is said once the request is accepted, so that a refusal stays one line.
    until_full: -n -1 / -2 (params.max_tokens None): all the room left, not the default. images: --image's
    content parts, ahead of `text` in its message."""
    from hearth.llm_vision import tokens_prompt  # beside LLM's import: the command's flags read first

    message = {"role": "user", "content": [*images, {"type": "text", "text": text}] if images else text}
    ids = _prompt_ids(llm, history, message)
    if params.max_tokens is None:  # not given: the default (or -n -1: no cap), within the room left
        cap = llm.max_model_len if until_full else DEFAULT_MAX_TOKENS
        params = replace(params, max_tokens=max(1, min(cap, llm.max_model_len - len(ids))))
    try:
        check_room(len(ids), params.max_tokens, llm.max_model_len, "--max-tokens",  # named as run's flag
                   llm.engine.model_context)
        llm.engine.check_request(ids, params)
    except MaxTokensTooLargeError as e:
        raise HearthError(f"{e}; lower it{' or raise --ctx' if e.can_raise else ''}") from None
    except PromptTooLongError as e:
        raise HearthError(f"{too_long(e.prompt_tokens, e.max_context)}; "
                          f"shorten it{' or raise --ctx' if e.can_raise else ''}") from None
    if note:
        print(note, file=sys.stderr, flush=True)
    if history is not None:
        history.append(message)
    spec = llm.engine.spec  # its counters run over the session: this answer's are the difference
    before = spec.stats.snapshot() if spec is not None else None
    start, first, parts, n, stop = time.perf_counter(), None, [], 0, None
    try:
        for out in llm.stream(tokens_prompt(ids), params):
            if first is None:
                first = time.perf_counter()
            n += len(out.new_token_ids)
            parts.append(out.new_text)
            sys.stdout.write(out.new_text)
            sys.stdout.flush()
            if out.finish_reason == "length":  # the room left capped max_tokens (or it asked for all of it)
                stop = CONTEXT_FULL if len(ids) + n >= llm.max_model_len else MAX_TOKENS
    except KeyboardInterrupt:
        stop = INTERRUPTED_ANSWER
    print()
    if history is not None:
        history.append({"role": "assistant", "content": "".join(parts)})
    if verbose and first is not None:
        end = time.perf_counter()
        rate = (n - 1) / (end - first) if n > 1 and end > first else 0.0
        print(f"prompt: {len(ids)} tokens, {first - start:.2f}s to first token; "
              f"answer: {n} tokens, {rate:.1f} tok/s{_speculation_text(before, spec, n)}", file=sys.stderr)
    return stop


def cut_notice(max_tokens: int | None, structured: bool) -> str | None:
    """The line said when --max-tokens stopped an answer (max_tokens: the flag, None when not given), else None.
    A cut at hearth's own default, or in an answer held to a format (its JSON left open), was silent; a cut
    that -n asked for stays silent, as llama-cli's."""
    if max_tokens is None:
        return (f"hearth: the answer stopped at {DEFAULT_MAX_TOKENS} tokens, the default --max-tokens (-n); "
                "-n N for a longer one, -n -1 until an end token")
    if structured:
        return f"hearth: the answer stopped at --max-tokens {max_tokens} before its format was complete; raise -n"
    return None


def full_notice(llm, remedy: str | None = None) -> str:
    """The line said when an answer stopped at the context's end; remedy: what else this mode can do."""
    ways = [remedy] if remedy else []
    if can_raise_context(llm.max_model_len, llm.engine.model_context):
        ways.append("run with a larger --ctx")
    how = f"; {', or '.join(ways)}" if ways else " (the model's own context)"
    return f"hearth: the context ({llm.max_model_len} tokens) is full, so the answer stopped there{how}"


def _speculation_text(before, spec, n: int) -> str:
    """This answer's drafts, as llama-speculative's n_drafted / n_accept, and the acceptance length:
    its n tokens per target forward (each forward commits one token plus the drafts it accepted, as
    hearth bench counts it), and the steps the policy paused, why as hearth bench says it (`-md` on a
    CPU where the draft cannot pay read "0 drafted" and nothing more); "" without speculation."""
    if spec is None:
        return ""
    now = spec.stats
    drafted, accepted = now.num_draft_tokens - before.num_draft_tokens, now.num_accepted_tokens - before.num_accepted_tokens
    share = f" ({100 * accepted / drafted:.0f}%)" if drafted else ""
    length = f", acceptance length {n / (n - accepted):.2f}" if 0 <= accepted < n else ""
    failing = now.num_paused_failing - before.num_paused_failing
    not_paying = now.num_paused_not_paying - before.num_paused_not_paying
    paused = (f", {failing + not_paying} steps paused ({failing} as the drafts kept failing, {not_paying} as they "
              "would not pay on this machine)") if failing or not_paying else ""
    return f"; speculation: {drafted} drafted, {accepted} accepted{share}{length}{paused}"


def _prompt_ids(llm, history: list[dict] | None, message: dict) -> list[int]:
    if history is None:
        return llm.tokenizer.encode(message["content"])  # as LLM.generate encodes a plain prompt
    try:
        return llm.encode_chat(history + [message])
    except ValueError as e:  # an image that is none (the server's 400)
        raise HearthError(str(e)) from None
