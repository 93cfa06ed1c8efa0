"""Which of a row's past tokens each history-reading option reads: the repetition / presence / frequency
penalties (vLLM's rule, or llama.cpp's window: SamplingParams.repeat_last_n) and DRY's window. A history is
(prompt ids, output ids); the scheduler sends only the tail these read (context_needed), and on a verify row
the output holds the drafts before it, so a window sees them as plain decoding would."""

from __future__ import annotations

from hearth.sampling_params import SamplingParams


def last_tokens(prompt: list[int], output: list[int], n: int) -> list[int]:
    """The context's last n tokens, prompt then output (n -1: all of them, llama.cpp's context size)."""
    if n < 0:
        return prompt + output
    if n <= len(output):
        return output[len(output) - n:]
    return prompt[max(0, len(prompt) - (n - len(output))):] + output


def penalty_tokens(p: SamplingParams, prompt: list[int], output: list[int]) -> tuple[list[int], list[int]]:
    """(the tokens the repetition penalty reads, those presence and frequency read; a token once per time it
    occurs). repeat_last_n None: vLLM's rule (prompt and output; output only); else llama.cpp's penalties
    sampler, which reads one window of the context (the prompt too: llama-server accepts its tokens) for all three."""
    if not p.penalized:
        return [], []
    rep = p.repetition_penalty != 1.0  # else its list is not built: O(context) a step for nothing
    if p.repeat_last_n is None:
        return prompt + output if rep else [], output
    window = last_tokens(prompt, output, p.repeat_last_n)
    return window if rep else [], window


def dry_window(p: SamplingParams, prompt: list[int], output: list[int]) -> list[int]:
    """The tokens DRY scans: the context's last dry_penalty_last_n (llama.cpp's ring buffer of that size)."""
    return last_tokens(prompt, output, p.dry_penalty_last_n) if p.dry else []


def context_needed(p: SamplingParams) -> int | None:
    """How many of the context's last tokens the penalties and DRY read: None every one (a penalty under
    vLLM's rule, or a window of -1), 0 none."""
    windows = []
    if p.penalized:
        windows.append(-1 if p.repeat_last_n is None else p.repeat_last_n)
    if p.dry:
        windows.append(p.dry_penalty_last_n)
    if any(w < 0 for w in windows):
        return None
    return max(windows, default=0)


def tail(prompt: list[int], output: list[int], need: int | None, output_need: int = 0) -> tuple[list[int], list[int]]:
    """The (prompt, output) a row's history carries: the last `need` tokens of the context (None: all) and at
    least the output's last output_need (bad words read those)."""
    if need is None:
        return prompt, output
    keep_out = min(len(output), max(need, output_need))
    keep_prompt = min(len(prompt), max(0, need - len(output)))
    return prompt[len(prompt) - keep_prompt:], output[len(output) - keep_out:]
