"""Typed plain-data messages between the scheduler (engine/) and the runner (runner/).

The scheduler never touches tensors; the runner never mutates scheduler state."""

from __future__ import annotations

from dataclasses import dataclass, field

from hearth.media.inputs import MediaInput
from hearth.sampling_params import SamplingParams


@dataclass(slots=True)
class ScheduledSequence:
    request_id: str
    token_ids: list[int]
    """The tokens to compute this step (a prefill chunk, or one decode token)."""
    start_pos: int
    """Position of token_ids[0] = tokens already in the cache."""
    block_ids: list[int]
    """The request's whole block table."""
    sample: bool
    """Sample a next token after this chunk (False for a chunk that ends inside the prompt)."""
    params: SamplingParams
    output_token_ids: list[int]
    """Tokens generated so far; only when a penalty is on (penalties read them)."""
    prompt_token_ids: list[int] = field(default_factory=list)
    """Only needed when a penalty is on."""
    banned_token_ids: list[int] = field(default_factory=list)
    """Tokens that may not be sampled this step (end-of-generation and stop ids before min_tokens)."""
    banned_rows: int = 1
    """banned_token_ids apply to the first banned_rows sampled rows (those still before min_tokens)."""
    spec_token_ids: list[int] = field(default_factory=list)
    """Draft tokens to verify after token_ids: a chain (draft i follows draft i - 1), or a tree's
    nodes with spec_parents. Rows: the real next token's, then one per draft; K/V is written for
    all of them, in node order, the scheduler rolls back the rejected ones."""
    spec_parents: list[int] = field(default_factory=list)
    """[] for a chain, else per draft its parent's index (-1: it follows token_ids[-1]), parents
    before children, siblings ranked (hearth.spec_decode.tree.DraftTree's layout)."""
    prefix_token_ids: list[int] = field(default_factory=list)
    """Only on a request's first step after an admission with a prefix-cache hit: its tokens before
    start_pos, whose target K/V came from the cache (a draft model may have to compute its own)."""
    num_draft_slots: int = 0
    """Drafts the runner's draft model writes after token_ids (method draft; spec_token_ids is then
    empty): budgeted and given KV slots by the scheduler like spec_token_ids."""
    prompt_targets: list[int] = field(default_factory=list)
    """Only for params.prompt_logprobs, while the prompt is computed: the prompt tokens that this
    chunk's first rows predict (token_ids[1:], and the next chunk's first token unless the prompt
    ends here): RunnerOutput.prompt_logprobs scores them."""
    media: list[MediaInput] = field(default_factory=list)
    """The request's image spans with a row among token_ids' positions (a causal one may be cut by the
    chunk; a bidirectional one never is): the runner writes their rows over those tokens' embeddings."""
    rope_delta: int = 0
    """M-RoPE's position delta at start_pos from the request's images before it (hearth.media.mrope.delta_before):
    a token that is no image row rotates at its index + the delta (with the shifts of `media` past it)."""
    state_slot: int = -1
    """Its recurrent layers' state slot (hearth.kvstore.recurrent: a model with such layers), else -1; the
    runner zeroes it when start_pos is 0 and continues from it otherwise."""
    state_restore: int = -1
    """Only on its first step after a prefix-cache hit: the snapshot slot whose state (right after start_pos)
    the runner copies into state_slot before computing (hearth.engine.state_snapshots), else -1."""
    state_snapshot: int = -1
    """The snapshot slot the runner copies state_slot into after this step (its tokens end on a block whose
    state a later hit may start from: RunnerOutput.snapshots reports it written), else -1."""

    @property
    def is_tree(self) -> bool:
        return any(p != i - 1 for i, p in enumerate(self.spec_parents))

    @property
    def num_drafts(self) -> int:
        return len(self.spec_token_ids) + self.num_draft_slots

    @property
    def num_tokens(self) -> int:
        """Rows this sequence contributes to the step: its tokens and its drafts."""
        return len(self.token_ids) + self.num_drafts


@dataclass(slots=True)
class SchedulerOutput:
    seqs: list[ScheduledSequence]
    finished_request_ids: list[str] = field(default_factory=list)
    """Requests that ended since the last step: the runner drops their per-request state."""
    kv_loads: list[tuple[int, bytes]] = field(default_factory=list)
    """(block id, payload): blocks found in the disk tier, verified; written before this step runs."""
    kv_saves: list[tuple[int, bytes]] = field(default_factory=list)
    """(block id, hash): full blocks to read out, as the last step left them, before anything else."""
    media_ahead: list[tuple[str, MediaInput]] = field(default_factory=list)
    """(request id, image) the runner starts encoding now, beside the steps (only where it encodes ahead:
    ModelRunner.encodes_ahead), each once per request: RunnerOutput.media_ready says when its rows are in."""
    prefault_blocks: range = range(0)
    """Sent alone while no request is left: the never-used blocks the next prompt will get, whose
    pages the runner makes resident until its next step (hearth.kvstore.prefault)."""

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.seqs)


@dataclass(slots=True)
class SampledToken:
    token_id: int
    logprob: float | None = None
    """After the runner's masks (banned ids, a grammar): over what the grammar allows."""
    top_logprobs: dict[int, float] | None = None
    raw_logprob: float | None = None
    """Only for params.raw_logprobs: the same before the grammar's mask (equal to logprob where the
    grammar removed nothing); None otherwise."""
    rank: int | None = None
    """With logprob: the token's rank among the row's (1: the most likely; 1 + the tokens strictly more
    likely), as vLLM's Logprob.rank."""


@dataclass(slots=True)
class RunnerOutput:
    sampled: dict[str, SampledToken]
    """request_id -> the token sampled for it this step (only sequences with sample=True); with
    drafts, the bonus token: the target's own token after the accepted ones."""
    kv_saved: list[bytes] = field(default_factory=list)
    """The payload of each of SchedulerOutput.kv_saves, in order."""
    accepted: dict[str, list[SampledToken]] = field(default_factory=dict)
    """request_id -> its drafts the target accepted, in order, before `sampled` (sequences with
    drafts only; absent or [] = none accepted)."""
    steady: bool = True
    """False: the step did one-off work beside its rows (the draft model catching up a prompt or
    a pause), so its time is not what a step of its rows costs (hearth.spec_decode.cost)."""
    catch_up: tuple[int, float] = (0, 0.0)
    """The draft model's catch-up prefills this step (its rows, seconds): what a lag costs."""
    draft_lag: dict[str, int] = field(default_factory=dict)
    """request_id -> tokens the draft model has yet to compute before it drafts for it again (its
    prompt until it first drafts): the policy weighs that catch-up against what drafting could win."""
    forced: dict[str, list[int]] = field(default_factory=dict)
    """request_id -> the tokens its grammar forces next, after this step's tokens (only where
    ModelRunner.forced_drafts is on): the engine's drafts for that request's next step."""
    drafted: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    """request_id -> (tokens, parents) of the drafts the runner's draft model wrote into its slots
    (method draft; parents [] for a chain): what was verified, for the acceptance statistics."""
    media_errors: dict[str, str] = field(default_factory=dict)
    """request_id -> why its image could not be encoded (the vision encoder raised, or made rows of
    another shape): the step ran without it and computed none of its rows; it ends with this error."""
    media_ready: dict[str, list[bytes]] = field(default_factory=dict)
    """request_id -> digests of its SchedulerOutput.media_ahead images whose rows are now encoded: the
    scheduler may schedule their positions from the next step."""
    media_encoding: int = 0
    """Images still being encoded beside the steps (a step with nothing to run waits for one of them)."""
    dead_ends: dict[str, str] = field(default_factory=dict)
    """request_id -> why its row had no token to sample (its bad_words removed every token its grammar
    allows): its token this step is no answer's; it ends with this error (the bad_words field's)."""
    grammar_errors: dict[str, str] = field(default_factory=dict)
    """request_id -> why its grammar engine gave up this step (llguidance's parser or lexer limits, met
    mid-answer: its mask then allowed only the end, so its last token is no answer's)."""
    prompt_logprobs: dict[str, list[dict[int, float]]] = field(default_factory=dict)
    """request_id -> per prompt_targets token {its id: logprob, then the top params.prompt_logprobs},
    from the model's raw logits."""
    prompt_ranks: dict[str, list[int]] = field(default_factory=dict)
    """request_id -> per prompt_targets token its rank in the vocabulary (1: the most likely; 1 + the
    tokens strictly more likely), beside prompt_logprobs."""
    snapshots: list[int] = field(default_factory=list)
    """The ScheduledSequence.state_snapshot slots the runner wrote this step (one it skipped, e.g. a request whose
    image failed, stays empty)."""
    pooled: dict[str, list[float]] = field(default_factory=dict)
    """request_id -> the sum of the final hidden states of the rows its SamplingParams.pooling reads
    this step (hearth.runner.pooling): [hidden]."""
