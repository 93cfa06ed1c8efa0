"""Seeded workloads: the same (workload, seed) gives the same prompts in the same order, on any
machine. Prompt i has its own generator, seeded by (prompt family, seed, i), so a run with fewer
requests sends a prefix of a longer run's prompts and a reference run still lines up by index."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from hearth.bench import BenchError, corpus

LONG_PROMPT_WORDS = 2000
"""Words of prose in a long-prompt request: ~2,600 tokens for a 50k-vocabulary BPE tokenizer."""
MAX_CONCURRENCY = 1024
DOCUMENT_TASKS = (
    "Summarise the document above in five sentences.",
    "List the three paragraphs of the document above that you found most surprising, and say why.",
    "Write ten quiz questions, with answers, about the document above.",
    "Which topics in the document above are about nature and which about human inventions? Make two lists.",
    "Explain the main idea of the first and the last paragraph of the document above.",
)
CODE_SYSTEM = "You are an expert Python programmer. Reply with the complete updated file in one code block."


@dataclass(frozen=True, slots=True)
class BenchRequest:
    index: int
    """The prompt's number in the workload: what a reference run is matched on."""
    messages: list[dict]
    max_tokens: int

    @property
    def prompt_sha(self) -> str:
        text = json.dumps(self.messages, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Level:
    """Requests sent with at most `concurrency` in flight (a closed loop of that many users)."""

    concurrency: int
    requests: tuple[BenchRequest, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    seed: int
    max_tokens: int
    levels: tuple[Level, ...]

    @property
    def max_concurrency(self) -> int:
        return max(level.concurrency for level in self.levels)

    @property
    def num_requests(self) -> int:
        return sum(len(level.requests) for level in self.levels)


def chat_prompt(rng: random.Random) -> list[dict]:
    data = corpus.chat()
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": rng.choice(data["system_prompts"])})
    if rng.random() < 0.4:
        messages += [dict(m) for m in rng.choice(data["conversations"])]
    else:
        messages.append({"role": "user", "content": rng.choice(data["questions"])})
    return messages


def long_prompt(rng: random.Random) -> list[dict]:
    paragraphs = list(corpus.paragraphs())
    rng.shuffle(paragraphs)
    picked, words = [], 0
    for p in paragraphs:
        if words >= LONG_PROMPT_WORDS:
            break
        picked.append(p)
        words += len(p.split())
    document = "\n\n".join(picked)
    task = rng.choice(DOCUMENT_TASKS)
    return [{"role": "user", "content": f"Read this document.\n\n{document}\n\n{task}"}]


def code_edit_prompt(rng: random.Random) -> list[dict]:
    edits = corpus.code_edits()
    name = rng.choice(sorted(edits))
    instruction = rng.choice(edits[name])
    code = corpus.code_file(name)
    shown = name.removesuffix(".txt")
    return [{"role": "system", "content": CODE_SYSTEM},
            {"role": "user", "content": f"Here is `{shown}`:\n\n```python\n{code}```\n\n{instruction}"}]


SHARED_PREFIX_CONVERSATIONS = 16
SHARED_PREFIX_TURNS = 6
SHARED_PREFIX_SYSTEM_PARAGRAPHS = 6


def shared_prefix_prompt(rng: random.Random) -> list[dict]:
    """A turn of one of a few conversations that all open with the same long system prompt (a
    product's instructions), each with its own growing history: requests share the system prompt,
    and those of one conversation share its history too (what prefix-aware routing is for)."""
    paragraphs = corpus.paragraphs()
    system = "You are the assistant of a reference library. Answer from what follows.\n\n" + \
        "\n\n".join(paragraphs[:SHARED_PREFIX_SYSTEM_PARAGRAPHS])
    conversation = rng.randrange(SHARED_PREFIX_CONVERSATIONS)
    turn = rng.randrange(SHARED_PREFIX_TURNS)
    script = random.Random(f"shared-prefix-conversation:{conversation}")  # the same history every time
    questions, answers = corpus.chat()["questions"], paragraphs[SHARED_PREFIX_SYSTEM_PARAGRAPHS:]
    messages = [{"role": "system", "content": system}]
    for _ in range(turn):
        messages += [{"role": "user", "content": script.choice(questions)},
                     {"role": "assistant", "content": script.choice(answers)}]
    messages.append({"role": "user", "content": script.choice(questions)})
    return messages


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    about: str
    family: str
    """Prompt generator and its seed namespace: workloads of one family share prompts."""
    prompt: Callable[[random.Random], list[dict]]
    requests: int
    """Default request count (per level for a sweep; 0 there means twice the level's concurrency)."""
    concurrency: int
    max_tokens: int
    sweep: bool = False


WORKLOADS: dict[str, WorkloadSpec] = {
    "chat": WorkloadSpec("short multi-turn chat prompts", "chat", chat_prompt, 8, 4, 128),
    "long-prompt": WorkloadSpec(f"~{LONG_PROMPT_WORDS:,} words of prose and a question about them",
                                "long-prompt", long_prompt, 4, 1, 64),
    "code-edit": WorkloadSpec("a ~130-line Python file and an edit instruction", "code-edit",
                              code_edit_prompt, 4, 1, 256),
    "shared-prefix": WorkloadSpec(f"turns of {SHARED_PREFIX_CONVERSATIONS} conversations sharing a long system "
                                  "prompt, each with its own growing history", "shared-prefix",
                                  shared_prefix_prompt, 32, 8, 32),
    "concurrency-sweep": WorkloadSpec("chat at concurrency 1, 2, 4, ... up to --concurrency", "chat",
                                      chat_prompt, 0, 8, 64, sweep=True),
}


def workload_spec(name: str) -> WorkloadSpec:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise BenchError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None


def prompts(family: str, seed: int, count: int) -> list[list[dict]]:
    spec = next(s for s in WORKLOADS.values() if s.family == family)
    return [spec.prompt(random.Random(f"{family}:{seed}:{i}")) for i in range(count)]


def sweep_levels(top: int) -> list[int]:
    """1, 2, 4, ... and `top` itself when it is not a power of two."""
    levels = [1 << k for k in range(top.bit_length()) if 1 << k <= top]
    return levels if levels[-1] == top else [*levels, top]


def check_numbers(requests: int | None, concurrency: int | None, max_tokens: int | None,
                  levels: list[int] | None = None) -> None:
    if requests is not None and requests < 1:
        raise BenchError(f"--requests must be at least 1, got {requests}")
    if concurrency is not None and not 1 <= concurrency <= MAX_CONCURRENCY:
        raise BenchError(f"--concurrency must be between 1 and {MAX_CONCURRENCY}, got {concurrency}")
    if levels is not None:
        if concurrency is not None:
            raise BenchError("give --concurrency or --levels, not both")
        if not levels or not all(1 <= c <= MAX_CONCURRENCY for c in levels):
            raise BenchError(f"--levels must each be between 1 and {MAX_CONCURRENCY}, got {levels}")
    if max_tokens is not None and max_tokens < 1:
        raise BenchError(f"--max-tokens must be at least 1, got {max_tokens}")


def warmup_request(max_tokens: int) -> BenchRequest:
    """A prompt of no workload's, so warming up leaves nothing in a prefix cache that a timed
    request could hit."""
    return BenchRequest(-1, [{"role": "user", "content": "Say hello in one word."}], max_tokens)


def build_workload(name: str, seed: int = 0, requests: int | None = None, concurrency: int | None = None,
                   max_tokens: int | None = None, levels: list[int] | None = None) -> Workload:
    """None takes the workload's default; `levels` replaces the concurrency levels (a sweep's 1, 2,
    4, ...). Levels take consecutive prompts, none repeated: a prompt seen at an earlier level would
    be a prefix-cache hit and flatter its TTFT."""
    spec = workload_spec(name)
    check_numbers(requests, concurrency, max_tokens, levels)
    top = concurrency or spec.concurrency
    max_tokens = max_tokens or spec.max_tokens
    levels = levels or (sweep_levels(top) if spec.sweep else [top])
    counts = [(c, requests or spec.requests or 2 * c) for c in levels]
    all_prompts = prompts(spec.family, seed, sum(n for _, n in counts))
    levels, start = [], 0
    for c, n in counts:
        levels.append(Level(c, tuple(BenchRequest(i, all_prompts[i], max_tokens) for i in range(start, start + n))))
        start += n
    return Workload(name, seed, max_tokens, tuple(levels))
