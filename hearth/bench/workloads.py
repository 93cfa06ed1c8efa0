"""Seeded workloads: the same (workload, seed) gives the same prompts in the same order, on any
machine. Prompt i has its own generator, seeded by (prompt family, seed, i), so a run with fewer
requests sends a prefix of a longer run's prompts and a reference run still lines up by index."""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from hearth.bench import BenchError, corpus

log = logging.getLogger("hearth")

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


SHARED_PREFIX_SYSTEM_PROMPTS = 8
SHARED_PREFIX_CONVERSATIONS = 32
SHARED_PREFIX_TURNS = 8
"""A conversation ends after this many turns; the next in its place starts a new one."""
SHARED_PREFIX_SYSTEM_PARAGRAPHS = 6
"""~850 tokens of system prompt for a 50k-vocabulary BPE tokenizer."""


def shared_prefix_system(seed: int, k: int) -> str:
    """The k-th of the product's system prompts; the first words differ between prompts and seeds,
    so no two share even a first KV block."""
    paragraphs = random.Random(f"shared-prefix:{seed}:system:{k}").sample(
        corpus.paragraphs(), SHARED_PREFIX_SYSTEM_PARAGRAPHS)
    return (f"You are assistant {k} (edition {seed}) of a reference library. Answer from what follows.\n\n"
            + "\n\n".join(paragraphs))


def shared_prefix_order(seed: int, round_: int) -> list[int]:
    """Which conversation each request of a round serves: every conversation once, shuffled, but the
    first half of the last round's order stays in this round's first half, so a conversation's next
    turn comes at least half a round after its last (whose answer has then arrived) and the order
    follows no fixed cycle (a fixed one would let round-robin keep a conversation on one replica)."""
    order = random.Random(f"shared-prefix:{seed}:round:0").sample(range(SHARED_PREFIX_CONVERSATIONS),
                                                                   SHARED_PREFIX_CONVERSATIONS)
    half = SHARED_PREFIX_CONVERSATIONS // 2
    for r in range(1, round_ + 1):
        rng = random.Random(f"shared-prefix:{seed}:round:{r}")
        order = rng.sample(order[:half], half) + rng.sample(order[half:], len(order) - half)
    return order


def shared_prefix_prompt_at(seed: int, i: int) -> list[dict]:
    """Request i is turn i // CONVERSATIONS of one of CONVERSATIONS conversations, each opening with
    one of SYSTEM_PROMPTS long system prompts (a product's instructions, a few per deployment) and
    growing by a question and an answer a turn: requests share a system prompt with 1 in 8 of the
    others, and with their own conversation's earlier turns everything but the newest turn. More
    distinct prefixes than one replica's cache may hold is what real deployments see, and where
    routing a conversation back to the replica holding it pays."""
    round_ = i // SHARED_PREFIX_CONVERSATIONS
    slot = shared_prefix_order(seed, round_)[i % SHARED_PREFIX_CONVERSATIONS]
    conversation = slot + SHARED_PREFIX_CONVERSATIONS * (round_ // SHARED_PREFIX_TURNS)
    turn = round_ % SHARED_PREFIX_TURNS
    script = random.Random(f"shared-prefix:{seed}:conversation:{conversation}")  # the same history every turn
    questions, answers = corpus.chat()["questions"], corpus.paragraphs()
    messages = [{"role": "system", "content": shared_prefix_system(seed, conversation % SHARED_PREFIX_SYSTEM_PROMPTS)}]
    # the first question differs between live conversations (and between those sharing a system
    # prompt across generations), so no two conversations are one: later ones are drawn
    question = questions[(conversation + conversation // SHARED_PREFIX_CONVERSATIONS) % len(questions)]
    for _ in range(turn):  # drawn in the order they are said: turn t+1 extends turn t's script
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": script.choice(answers)}]
        question = script.choice(questions)
    messages.append({"role": "user", "content": question})
    return messages


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    about: str
    family: str
    """Prompt generator and its seed namespace: workloads of one family share prompts."""
    prompt: Callable[[random.Random], list[dict]] | None
    """Prompt i from its own generator, seeded by (family, seed, i)."""
    requests: int
    """Default request count (per level for a sweep; 0 there means twice the level's concurrency)."""
    concurrency: int
    max_tokens: int
    sweep: bool = False
    prompt_at: Callable[[int, int], list[dict]] | None = None
    """Prompt i from (seed, i), for a workload whose prompts depend on their place in the order
    (a conversation's turns): used instead of `prompt`."""


WORKLOADS: dict[str, WorkloadSpec] = {
    "chat": WorkloadSpec("short multi-turn chat prompts", "chat", chat_prompt, 8, 4, 128),
    "long-prompt": WorkloadSpec(f"~{LONG_PROMPT_WORDS:,} words of prose and a question about them",
                                "long-prompt", long_prompt, 4, 1, 64),
    "code-edit": WorkloadSpec("a ~130-line Python file and an edit instruction", "code-edit",
                              code_edit_prompt, 4, 1, 256),
    "shared-prefix": WorkloadSpec(f"turns of {SHARED_PREFIX_CONVERSATIONS} conversations, each opening with one of "
                                  f"{SHARED_PREFIX_SYSTEM_PROMPTS} long system prompts and growing a turn at a time",
                                  "shared-prefix", None, 64, 8, 16, prompt_at=shared_prefix_prompt_at),
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
    if spec.prompt_at is not None:
        return [spec.prompt_at(seed, i) for i in range(count)]
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


def _in_flight(levels: list[int], requests: int) -> list[tuple[int, int]]:
    """(concurrency, requests) per level for --requests N: a level of more than N in flight never had them (its
    report said concurrency 4 for one request at a time, and priced it against 4 sequences' ceiling); such a
    level runs at N, once, said in one line."""
    over = [c for c in levels if c > requests]
    if over:
        log.warning(f"--requests {requests} keeps at most {requests} in flight: concurrency "
                    f"{', '.join(map(str, over))} {'runs' if len(over) == 1 else 'run'} as {requests}")
    ran = dict.fromkeys(min(c, requests) for c in levels)  # in order, each once
    return [(c, requests) for c in ran]


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
    counts = _in_flight(levels, requests) if requests else [(c, max(spec.requests or 2 * c, c)) for c in levels]
    all_prompts = prompts(spec.family, seed, sum(n for _, n in counts))
    levels, start = [], 0
    for c, n in counts:
        levels.append(Level(c, tuple(BenchRequest(i, all_prompts[i], max_tokens) for i in range(start, start + n))))
        start += n
    return Workload(name, seed, max_tokens, tuple(levels))
