"""The engine step: schedule -> execute -> update, then detokenize what changed."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hearth.config import MAX_LOGPROBS
from hearth.engine.detokenizer import IncrementalDetokenizer
from hearth.engine.lora_adapters import NO_ADAPTERS, LoraAdapters
from hearth.engine.media_spans import check_media
from hearth.engine.pairs import a_reranker, not_a_reranker
from hearth.engine.request import Request, RequestStatus
from hearth.engine.scheduler import Scheduler
from hearth.errors import HearthError, PromptTooLongError
from hearth.media.inputs import MediaInput
from hearth.outputs import EngineOutput
from hearth.runner.messages import SampledToken, SchedulerOutput
from hearth.sample.bad_words import word_token_ids
from hearth.sample.dry_breakers import breaker_sequences
from hearth.sample.grammar import compile_grammar, stopped
from hearth.sampling_params import InvalidSamplingParams, SamplingParams, over_max_logprobs
from hearth.spec_decode.policy import SpeculativeDecoder


class InvalidPromptError(HearthError):
    """A prompt that is empty or holds token ids outside the vocabulary."""


class MediaEncodeError(HearthError):
    """The vision encoder failed on one of a request's images: that request ends with this error (the
    server answers 500), the other requests of its step go on."""


def check_prompt(prompt_token_ids: list[int], max_model_len: int, vocab_size: int,
                 model_context: int | None = None) -> None:
    """Raise a one-line error for a prompt the engine cannot take; never truncate it. model_context:
    the model's own (None: unknown), so that the error says whether a longer context would help."""
    n = len(prompt_token_ids)
    if n == 0:
        raise InvalidPromptError("prompt is empty: give at least one token")
    if n >= max_model_len:
        raise PromptTooLongError(n, max_model_len, model_context)
    bad = [t for t in prompt_token_ids if not 0 <= t < vocab_size]
    if bad:
        raise InvalidPromptError(f"token id {bad[0]} is outside the vocabulary (0..{vocab_size - 1})")


def check_request(prompt_token_ids: list[int], params: SamplingParams, max_model_len: int, vocab_size: int,
                  model_context: int | None = None, max_logprobs: int = MAX_LOGPROBS, reranker: bool = False) -> None:
    """check_prompt, top-k logprobs within max_logprobs (-1: no cap) and the vocabulary, and a
    structured-output constraint the grammar engine can compile (also run by a cluster's front end,
    which holds no engine). A max_tokens past the room left is the API's and the CLI's error (where a
    client set it: hearth.errors.check_room); here it ends the answer. reranker: a decoder reranker's engine
    (pooling_type 4), which scores pairs (pooling "rank") and nothing else."""
    if not isinstance(params, SamplingParams):  # LLM.generate(p, {"max_tokens": 8}) was "'dict' has no attribute"
        raise TypeError(f"sampling params must be a hearth.SamplingParams (SamplingParams(max_tokens=...)), "
                        f"not {type(params).__name__}")
    check_prompt(prompt_token_ids, max_model_len, vocab_size, model_context)
    if params.pooling == "cls":  # an encoder's [CLS] token: a decoder's first token has seen nothing else
        raise InvalidSamplingParams("pooling", "cls pools an encoder's first token; a decoder pools mean or last")
    if params.pooling == "rank" and not reranker:
        raise InvalidSamplingParams("pooling", not_a_reranker("this model", "a text generation model"))
    if reranker and params.pooling != "rank":  # its text would be a yes or a no, its embedding no embedding
        raise InvalidPromptError(a_reranker("this model"))
    for field in ("logprobs", "prompt_logprobs"):  # more failed the runner's topk, and the whole step
        k = getattr(params, field)
        if k is not None and (why := over_max_logprobs(k, max_logprobs)):
            raise InvalidSamplingParams(field, why)
        if k is not None and k > vocab_size:
            raise InvalidSamplingParams(field, f"must be at most the vocabulary's size ({vocab_size}), got {k}")
    bad = next((t for t in params.allowed_token_ids or () if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise InvalidSamplingParams("allowed_token_ids", f"token id {bad} is outside the vocabulary (0..{vocab_size - 1})")
    if params.structured_output is not None:
        compile_grammar(params.structured_output)


@dataclass(slots=True)
class GrammarDraftStats:
    """Grammar-forced draft tokens (EngineCore.forced) verified, and accepted, so far."""
    drafted: int = 0
    accepted: int = 0


class EngineCore:
    def __init__(self, scheduler: Scheduler, runner, tokenizer, max_model_len: int, vocab_size: int,
                 spec: SpeculativeDecoder | None = None, model_context: int | None = None,
                 max_logprobs: int = MAX_LOGPROBS, lora: LoraAdapters | None = None, reranker: bool = False):
        """spec: proposes draft tokens before each step (None: one token per sequence and step).
        model_context: the model's own context (max_model_len is at most it; None: unknown).
        max_logprobs: EngineConfig's, the most top logprobs a request may ask per token (-1: no cap).
        lora: the model's LoRA adapters and their global scales (None: none loaded).
        reranker: the model is a decoder reranker: its requests are pairs to score (check_request)."""
        self.lora, self.reranker = lora, reranker
        self.scheduler, self.runner, self.tokenizer = scheduler, runner, tokenizer
        self.spec = spec
        self.grammar_drafts = GrammarDraftStats()
        self.forced: dict[str, list[int]] = {}
        """request id -> the tokens its grammar forces next (RunnerOutput.forced): drafted for its
        next step where the proposer offers none, so a forced run (`", "arguments": {` after a tool's
        name) costs one verify step, not a decode step a token."""
        self.max_model_len, self.vocab_size, self.model_context = max_model_len, vocab_size, model_context
        self.max_logprobs = max_logprobs
        self.detokenizers: dict[str, IncrementalDetokenizer] = {}
        self._dry_breakers: dict[tuple[str, ...], dict[int, list[list[int]]]] = {}
        """DRY's sequence breakers -> their token sequences (dry_breakers), found once each."""
        self.stalled = False
        """The last step ran nothing and moved no K/V: only requests that cannot be admitted now wait,
        and only a new request or an abort changes that (the async loop then sleeps, never spins)."""
        self.executing: list[str] | None = None
        """The requests of the runner call in progress (failed_step reads it after step() raised)."""
        self.last_sequence: list[int] = []
        """The token ids of the request that ended last (finished or aborted): what a llama-server
        slot holds after it, which `/slots/{id}?action=save` without a conversation saves."""
        self._ids = itertools.count()
        self._idle()

    def check_prompt(self, prompt_token_ids: list[int]) -> None:
        check_prompt(prompt_token_ids, self.max_model_len, self.vocab_size, self.model_context)

    def check_request(self, prompt_token_ids: list[int], params: SamplingParams,
                      media: Sequence[MediaInput] = ()) -> SamplingParams:
        """Raises naming what is wrong; returns the params to queue: bad_words' token ids on (a copy where
        they were found here, so add_request(checked=True) does not tokenize them again)."""
        check_request(prompt_token_ids, params, self.max_model_len, self.vocab_size, self.model_context,
                      self.max_logprobs, self.reranker)
        sequences = self.bad_word_ids(params)
        breakers = self.dry_breakers(params)
        (self.lora or NO_ADAPTERS).check(params.lora)
        if media:
            self.check_media(prompt_token_ids, media)
        if sequences and not params.bad_words_token_ids:  # a copy: the caller's params stay as given
            params = replace(params, bad_words_token_ids=sequences)
        if breakers is not params.dry_breaker_ids:
            params = replace(params, dry_breaker_ids=breakers)
        whole = {f: self.vocab_size for f in ("logprobs", "prompt_logprobs") if getattr(params, f) == -1}
        return replace(params, **whole) if whole else params  # vLLM's -1, where max_logprobs -1 lets it through

    def dry_breakers(self, params: SamplingParams) -> dict[int, list[list[int]]] | None:
        """DRY's sequence breakers as token sequences (hearth.sample.dry_breakers) where DRY is on and the
        caller gave none: found once per list of breakers (every vocabulary token is read), then shared."""
        if not params.dry or params.dry_breaker_ids is not None:
            return params.dry_breaker_ids
        key = tuple(params.dry_sequence_breakers)
        if key not in self._dry_breakers:
            encode = lambda t: self.tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
            pieces = self.tokenizer.token_pieces()[:self.vocab_size]  # ids the model's head scores
            self._dry_breakers[key] = breaker_sequences(key, pieces, encode)
        return self._dry_breakers[key]

    def bad_word_ids(self, params: SamplingParams) -> list[list[int]]:
        """params.bad_words' token sequences (vLLM's rule: hearth.sample.bad_words), each id in the model's
        vocabulary (a tokenizer may hold more ids than the model's head scores)."""
        if params.bad_words_token_ids or not params.bad_words:
            sequences = params.bad_words_token_ids
        else:
            sequences = word_token_ids(params.bad_words, lambda t: self.tokenizer.encode(t, add_special_tokens=False))
        if not all(sequences):
            raise InvalidSamplingParams("bad_words", "must not hold a word of no tokens")
        bad = next((t for ids in sequences for t in ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise InvalidSamplingParams("bad_words", f"token id {bad} is outside the vocabulary "
                                                     f"(0..{self.vocab_size - 1})")
        return sequences

    def check_media(self, prompt_token_ids: list[int], media: Sequence[MediaInput]) -> None:
        """Image spans this engine can take with this prompt, else InvalidPromptError naming why."""
        if getattr(self.runner, "vision", None) is None:
            raise InvalidPromptError("this model reads text only: images need a vision encoder (--mmproj)")
        sched = self.scheduler
        why = check_media(media, len(prompt_token_ids), sched.max_num_batched_tokens, sched.max_num_seqs)
        if why is not None:
            raise InvalidPromptError(why)

    def add_request(self, prompt_token_ids: list[int], params: SamplingParams,
                    request_id: str | None = None, checked: bool = False,
                    media: Sequence[MediaInput] = ()) -> str:
        """checked: the caller already ran check_request and passes the params it returned (it compiles any
        grammar and tokenizes bad_words: not twice).
        media: image spans in the prompt (sorted, disjoint), each's rows written over its positions."""
        if not checked:
            params = self.check_request(prompt_token_ids, params, media)
        rid = request_id if request_id is not None else str(next(self._ids))
        if rid in self.detokenizers:  # a second one would take over the first's detokenizer and state
            raise ValueError(f"request id {rid!r} is already in the engine")
        eos = frozenset(self.tokenizer.eog_ids)
        if self.lora is not None:  # every adapter's scale, fixed for the request (its K/V's cache key)
            params = replace(params, lora=self.lora.resolve(params.lora))
        self.scheduler.add(Request(rid, prompt_token_ids, params, eos, self.max_model_len, media))
        self.detokenizers[rid] = IncrementalDetokenizer(self.tokenizer, params)
        return rid

    def abort_soon(self, request_id: str) -> None:
        """From the abort's own thread, before the engine thread takes the abort between steps: the runner's
        queued work for the request (an image not yet encoding) goes now. Thread-safe where the runner's is."""
        soon = getattr(self.runner, "abort_soon", None)  # a runner without encoders has nothing queued
        if soon is not None:
            soon(request_id)

    def abort(self, request_id: str) -> None:
        ended = self.scheduler.finish_request(request_id)
        if ended is not None:
            self.last_sequence = ended.all_token_ids
        self._forget(request_id)
        if ended is not None and not self.scheduler.has_unfinished():  # the last one (a failed step's too)
            self._idle()  # its runner state goes now, not when the next request comes

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[EngineOutput]:
        self.executing = None
        grammar_drafted = self._propose() if self.spec is not None or self.forced else set()
        self.scheduler.encode_ahead = getattr(self.runner, "encodes_ahead", False)  # set_vision may come late
        so = self.scheduler.schedule()
        t0 = time.perf_counter()
        self.executing = [s.request_id for s in so.seqs]
        try:
            result = self.runner.execute(so)
        except BaseException:
            self.scheduler.step_failed(so)
            raise
        self.executing = None
        seconds = time.perf_counter() - t0
        # nothing could run: the loop waits for a command, unless an image is being encoded for a request
        self.stalled = not (so.seqs or so.kv_loads or so.kv_saves or result.media_encoding or result.media_ready)
        # ended before update, which then skips them: none of their blocks is cached uncomputed
        failed = [o for rid, why in result.media_errors.items() if (o := self._failed(rid, MediaEncodeError(why)))]
        failed += [o for rid, why in result.dead_ends.items()
                   if (o := self._failed(rid, InvalidSamplingParams("bad_words", why)))]
        changed = self.scheduler.update(so, result)
        for rid in result.sampled if self.forced else ():  # forced tokens hold for the step right after this one
            self.forced.pop(rid, None)
        self.forced.update(result.forced)
        results = self.scheduler.spec_results
        for o in results:
            if o.request_id in grammar_drafted:
                self.grammar_drafts.drafted += o.drafted
                self.grammar_drafts.accepted += o.accepted
        if self.spec is not None:
            if result.steady and so.seqs and all(len(s.token_ids) == 1 for s in so.seqs):  # what drafts cost
                self.spec.timed(so.num_tokens, seconds)
            self.spec.caught_up(*result.catch_up, result.draft_lag)
            self.spec.observe([o for o in results if o.request_id not in grammar_drafted])
        self.scheduler.spec_results = []
        outputs = [self._output(req, tokens) for req, tokens in changed]
        for (req, _), o in zip(changed, outputs):
            if (why := result.grammar_errors.get(req.request_id)) is not None:
                self._grammar_gave_up(req, o, why)
        if not self.scheduler.has_unfinished():
            self._idle()
        return failed + outputs

    def _failed(self, request_id: str, error: HearthError) -> EngineOutput | None:
        """The runner could not run the request this step (an image it could not encode, a row with no token
        to sample): it ends now with that error, its token unsent (its blocks freed uncomputed); None where it
        ended while the step ran."""
        req = self.scheduler.finish_request(request_id)
        if req is None:
            return None
        self._forget(request_id)
        self.last_sequence = req.all_token_ids
        return EngineOutput(request_id=request_id, new_token_ids=[], new_text="", finished=True,
                            finish_reason="abort", num_prompt_tokens=len(req.prompt_token_ids),
                            num_cached_tokens=req.num_cached_tokens, error=error)

    def _grammar_gave_up(self, req: Request, o: EngineOutput, why: str) -> None:
        """The request's grammar engine gave up this step: it ends with that error (o.error), not with
        the end token its mask then allowed, as if its answer were whole."""
        if not o.finished:
            self.scheduler.finish_request(req.request_id)
            self._forget(req.request_id)
        o.finished, o.finish_reason = True, "abort"
        o.error = stopped(req.params.structured_output, why)

    def failed_step(self) -> list[str] | None:
        """After step() raised: the requests of its runner call where the runner failed (only their
        state is in doubt: their blocks and the runner's per-request state go with their abort),
        None where another part of the step failed (the scheduler's bookkeeping is then in doubt)."""
        failed, self.executing = self.executing, None
        return failed

    def _propose(self) -> set[str]:
        """Drafts for the running requests that decode their next token this step: the proposer's,
        else the tokens the request's grammar forces. -> the requests given the grammar's."""
        decoding = [r for r in self.scheduler.running if r.num_tokens - r.num_computed_tokens == 1]
        drafts = self.spec.propose(decoding, len(self.scheduler.running)) if self.spec is not None else {}
        forced = set()
        for req in decoding:
            d = drafts.get(req.request_id)
            # a seeded sampled request's draws follow its drafts' count, which follows the batch: none
            if not d and req.request_id in self.forced and (req.params.greedy or req.params.seed is None):
                d = self.forced[req.request_id]
                forced.add(req.request_id)
            self.scheduler.set_drafts(req, d or [])
        return forced

    def _forget(self, request_id: str) -> None:
        self.detokenizers.pop(request_id, None)
        self.forced.pop(request_id, None)
        if self.spec is not None:
            self.spec.forget(request_id)

    def _idle(self) -> None:
        """Nothing left to run: the runner drops the state of the requests that ended and may prepare
        the KV blocks the next prompt gets."""
        so = self.scheduler.idle_output()
        if so is not None:
            self.runner.execute(so)

    def export_prefix(self, token_ids: list[int]) -> list[bytes]:
        """The payloads of token_ids' full blocks found in the prefix cache (memory or disk), in
        order, up to the first missing one: what a saved snapshot holds. Between steps only."""
        kv = self.scheduler.kv
        found = kv.locate_prefix(token_ids)
        in_memory = [(b, kv.pool.block_hash[b]) for b in found if isinstance(b, int)]
        read = iter(self.runner.execute(SchedulerOutput([], kv_saves=in_memory)).kv_saved if in_memory else ())
        return [next(read) if isinstance(b, int) else b for b in found]

    def close(self) -> None:
        self.scheduler.kv.close()

    def _output(self, req: Request, tokens: list[SampledToken]) -> EngineOutput:
        """The delta of one request's new tokens (several after an accepted draft run), each passed
        through the detokenizer and stop strings as alone: a stop string ends the run there."""
        detok = self.detokenizers[req.request_id]
        n_before = len(req.output_token_ids) - len(tokens)
        for i, t in enumerate(tokens):
            last = i == len(tokens) - 1
            stop = detok.add(t.token_id, final=last and req.status.finished,
                             check_stop=n_before + i + 1 >= req.params.min_tokens,
                             stop_token=last and req.status.finished and req.stop_reason == t.token_id)
            if stop is None:
                continue
            del req.output_token_ids[n_before + i + 1:]  # the tokens after the stop never happened
            tokens = tokens[: i + 1]
            if not req.status.finished:
                self.scheduler.finish_request(req.request_id, RequestStatus.FINISHED_STOPPED, stop)
            else:
                req.finish(RequestStatus.FINISHED_STOPPED, stop)
            break
        finished = req.status.finished
        if finished:
            detok.flush()
            self._forget(req.request_id)
            self.last_sequence = req.all_token_ids
        logprobs = None
        if tokens[0].logprob is not None:
            logprobs = [{t.token_id: t.logprob, **(t.top_logprobs or {})} for t in tokens]
        raw = [t.raw_logprob for t in tokens] if tokens[0].raw_logprob is not None else None
        first = n_before == 0 and req.params.prompt_logprobs is not None
        return EngineOutput(
            request_id=req.request_id,
            new_token_ids=[t.token_id for t in tokens],
            new_text=detok.new_text(finished),
            finished=finished,
            finish_reason=req.status.value if finished else None,
            stop_reason=req.stop_reason,
            new_logprobs=logprobs,
            new_ranks=[t.rank for t in tokens] if logprobs is not None else None,
            new_raw_logprobs=raw,
            num_prompt_tokens=len(req.prompt_token_ids),
            num_cached_tokens=req.num_cached_tokens,
            drafts=req.drafts,
            prompt_logprobs=[None, *req.prompt_logprobs] if first else None,
            prompt_ranks=[None, *req.prompt_ranks] if first else None,
            embedding=req.embedding() if finished and req.params.pooling else None,
        )
