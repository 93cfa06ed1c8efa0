"""Runs one engine step: builds the flat batch, runs the model over the paged KV cache, samples.

Owns the KV tensors and per-request sampling generators; reads SchedulerOutput, returns RunnerOutput."""

from __future__ import annotations

from dataclasses import replace

import torch

from hearth.config import LayerCache, ModelConfig, layer_caches
from hearth.kvstore.block_io import BlockIO, block_format
from hearth.kvstore.codecs import CODECS, PlainCodec, QuantCodec, cache_block_bytes, plain_dtype
from hearth.kvstore.paged import QuantizedKVCache, StagingTable
from hearth.kvstore.prefault import Prefaulter
from hearth.kvstore.recurrent import RecurrentStates
from hearth.runner.drafter import DraftModel
from hearth.runner.freed_pages import keep_freed_pages
from hearth.runner.grammar_matchers import constrain, constrain_rows, constrain_tree, forced, matched
from hearth.runner.grammar_rows import dead_ends, reached, scored_ids, wants_raw
from hearth.runner.media_rows import MediaRows
from hearth.runner.messages import RunnerOutput, SchedulerOutput
from hearth.runner.pooling import pooled_sums, pooling_rows
from hearth.runner.prompt_logprobs import prompt_rows, score_prompts, with_prompt_rows
from hearth.runner.sampled_tokens import sampled_token
from hearth.runner.state_slots import keep_accepted, save_snapshots, state_tables
from hearth.runner.step_inputs import step_inputs
from hearth.runner.tree_paths import move_path, node_paths
from hearth.sample.grammar import GrammarCompiler, GrammarMatcher
from hearth.sample.mirostat import MirostatState, start
from hearth.sample.sampler import sample
from hearth.sample.speculative import verify


IDLE_WAIT = 0.05
"""Seconds a step with nothing to run waits for an image being encoded (then the engine takes new requests)."""


class ModelRunner:
    def __init__(self, model: torch.nn.Module, cfg: ModelConfig, num_blocks: int, block_size: int,
                 codec: PlainCodec | QuantCodec = CODECS["f16"], seed: int = 0,
                 grammar: GrammarCompiler | None = None, max_num_seqs: int = 16, drafter: DraftModel | None = None,
                 vision=None, state_snapshots: int = 0):
        """drafter: the draft model that fills draft slots (speculative method draft). vision: what turns
        an image's pixels into the LM's rows, encode(pixels) -> [length, hidden] (None: text only).
        state_snapshots: recurrent-state snapshots kept for prefix-cache hits (a model with recurrent layers)."""
        keep_freed_pages()
        self.drafter = drafter
        self.model, self.cfg, self.block_size, self.codec = model, cfg, block_size, codec
        self.mrope = bool(cfg.rope_sections)  # images move its rope positions (rope_positions)
        self.backend = model.backend  # the one the model was built on (hearth.backends)
        self._allocate_kv(codec, num_blocks, max_num_seqs)
        # recurrent layers: a state slot per running sequence, and snapshots where prefix-cache hits start
        self.states, self.snapshots = state_tables(cfg, max_num_seqs, state_snapshots, self.backend.kv_zeros)
        self._before: RecurrentStates | None = None  # a verify step's drafting sequences' states before it
        self.block_format = block_format(codec, cfg, block_size)
        self.block_io = BlockIO(self.kv_caches, self.staging, self.block_format)
        host = all(c.device.type == "cpu" for c in self.kv_caches)
        self.prefaulter = Prefaulter(self.block_io.regions() if host else [])  # host pages only
        self.generators: dict[str, torch.Generator] = {}
        self.mirostat: dict[str, MirostatState] = {}
        """request id -> its mirostat state (hearth.sample.mirostat), which each token it samples moves."""
        self.grammar = grammar
        self.matchers: dict[str, GrammarMatcher] = {}
        self.forced_drafts = False
        """Report each constrained sequence's grammar-forced next tokens (RunnerOutput.forced): on
        where a verify row is computed as a decode row (row_regimes), so those drafts are lossless."""
        self._unseeded = torch.Generator().manual_seed(seed)
        self.set_vision(vision)

    def set_vision(self, vision) -> None:
        """The image encoder (an mmproj's VisionEncoder: encode(pixels) -> [length, hidden]), or None: text only.
        Set between steps (a loader may attach it after the LM is up); the engine reads `vision` to refuse
        images without one."""
        old = getattr(self, "media", None)
        self.vision = vision
        width = self.cfg.hidden_size * (1 + self.cfg.deepstack_layers)  # Qwen3-VL's rows carry deepstack parts
        self.media = None if vision is None else MediaRows(vision, width, self.encode_ahead)
        if old is not None:
            old.hand_over(self.media)  # the images the scheduler waits for: encoded by this one

    encode_ahead = True
    """Images are encoded on a background thread from when the scheduler announces them (SchedulerOutput.
    media_ahead), so the other sequences' steps go on meanwhile; False: inside the step that first reads
    their rows (every sequence of that step waits for the encoder). Read by set_vision."""

    @property
    def encodes_ahead(self) -> bool:
        """The scheduler announces images ahead and schedules none of an image's rows before it is encoded."""
        return self.media is not None and self.media.worker is not None

    def _allocate_kv(self, codec, num_blocks: int, max_num_seqs: int) -> None:
        cfg, bs = self.cfg, self.block_size
        self.staging = None
        caches = layer_caches(cfg)
        cache_block_bytes(codec, caches, bs)  # refuses what the codec cannot hold
        slots = codec.staging_blocks * max_num_seqs  # a quantized codec's f16 staging (as `hearth plan` counts)
        if codec.quantized:
            self.staging = StagingTable(bs, slots, codec.sink)
        self.kv_caches = [self._layer_cache(codec, c, num_blocks, slots) for c in caches]

    def _layer_cache(self, codec, c: LayerCache, num_blocks: int, slots: int):
        """One layer's cache (LayerCache c): K/V of its own [heads, dim] in the codec's format (a QuantizedKVCache
        when quantized), else a plain tensor [parts, num_blocks, block_size, heads, dim]: a short conv's input
        [1, ..., 1, hidden] (f16 beside quantized K/V), or [0, ...] for a KV-shared layer (it reads its source's)
        or a recurrent one (its state is a slot's)."""
        if codec.quantized and c.parts == 2:
            return QuantizedKVCache(codec, num_blocks, self.block_size, c.heads, c.dim, slots, self.backend.kv_zeros)
        return self.backend.kv_zeros(c.shape(num_blocks, self.block_size), plain_dtype(codec))

    @property
    def row_regimes(self) -> tuple[int, ...] | None:
        """Step sizes (rows) from which the kernels sum differently, so a row's bits may change
        across them (for the scheduler: drafts never push a step over one); None when even 1 + k
        rows of one sequence differ from a 1-row decode, so drafts would not be lossless
        (Backend.row_regimes)."""
        return self.backend.row_regimes(self.model, self.codec.quantized)

    @property
    def verify_rows(self) -> int:
        """Most rows of a step with drafts whose real rows are below the first row regime: such a
        step sums every matmul row as the GEMV does (Backend.batch_invariant: exact AMX tiles, or the
        GEMV), so each verify row is a decode row bit for bit, up to the prefill GEMMs' boundary.
        0 where no batch GEMM needs lifting."""
        regimes = self.row_regimes
        return regimes[-1] - 1 if regimes and len(regimes) > 1 else 0

    @property
    def row_passes(self) -> tuple[int, int, int]:
        """How a verify step's cost grows with its rows (StepCost.passes): (first, rows, tail)."""
        return self.backend.row_passes() if self.verify_rows else (0, 0, 0)

    def before_verify(self) -> RecurrentStates:
        """The table a verify step copies its drafting sequences' recurrent states into, slot for slot: made at
        the first one (host pages resident only where written: one state a drafting sequence)."""
        if self._before is None:
            self._before = RecurrentStates(self.cfg, self.states.slots, self.backend.kv_zeros)
        return self._before

    @property
    def kv_bytes(self) -> int:
        states = sum(s.nbytes for s in (self.states, self.snapshots) if s is not None)
        return states + sum(t.nbytes if isinstance(t, QuantizedKVCache) else t.numel() * t.element_size()
                            for t in self.kv_caches)

    @torch.inference_mode()
    def forward(self, so: SchedulerOutput) -> torch.Tensor:
        """[T, hidden]: the final hidden states of every scheduled token (K/V written to the cache),
        without sampling: what `hearth eval perplexity` scores."""
        self.forget(so.finished_request_ids)
        ids, positions, meta, embeds = step_inputs(self, so)
        return self.model(ids, positions, meta, self.kv_caches, **embeds)

    def execute(self, so: SchedulerOutput) -> RunnerOutput:
        self.forget(so.finished_request_ids)  # first: the ids come once, whatever fails after
        self.prefaulter.pause()  # a step has the cores to itself
        if so.prefault_blocks:
            self.prefaulter.start(so.prefault_blocks)
        # disk-tier transfers first: saves read what the last step left, before loads or this
        # step overwrite a reused block id
        saved = self.block_io.export([b for b, _ in so.kv_saves]) if so.kv_saves else []
        if so.kv_loads:
            if self.drafter is not None:  # the disk tier holds the target's K/V only
                self.drafter.invalidate([b for b, _ in so.kv_loads])
            self.block_io.load(so.kv_loads)
        failed, ready = {}, {}
        if self.media is not None:
            if so.media_ahead:
                self.media.submit(so.media_ahead)
            if not so.seqs and self.media.encoding and not self.media.has_news:
                self.media.worker.wait(IDLE_WAIT)  # nothing else to run: wake when an image is in
            failed = self.media.encode(so.seqs) if any(s.media for s in so.seqs) else {}
        if failed:  # a bad image ends its request only: the step runs the others
            so = replace(so, seqs=[s for s in so.seqs if s.request_id not in failed])
        out = self._execute(so)
        out.snapshots = save_snapshots(self.states, self.snapshots, so.seqs, out.snapshots)
        if self.media is not None and self.media.worker is not None:
            ready, late = self.media.report()
            failed = {**late, **failed}
            out.media_encoding = self.media.encoding
        out.media_errors, out.media_ready = failed, ready
        out.kv_saved = saved
        out.grammar_errors = {s.request_id: m.error for s in so.seqs
                              if (m := self.matchers.get(s.request_id)) is not None and m.error}
        return out

    def abort_soon(self, request_id: str) -> None:
        """The request is being aborted (AsyncEngine, from the abort's thread): its queued image encodes go now,
        not after the step that runs (its end still comes in SchedulerOutput.finished_request_ids, to `forget`).
        Thread-safe: reaches the encode worker alone (MediaRows.abort)."""
        media = self.media
        if media is not None:
            media.abort(request_id)

    def forget(self, request_ids: list[str]) -> None:
        """Drop the per-request state of requests that ended (repeating an id is harmless)."""
        for rid in request_ids:
            self.generators.pop(rid, None)
            self.mirostat.pop(rid, None)
            self.matchers.pop(rid, None)
            if self.staging is not None:
                self.staging.release(rid)
            if self.drafter is not None:
                self.drafter.forget(rid)
            if self.media is not None:
                self.media.forget(rid)

    @torch.inference_mode()
    def _execute(self, so: SchedulerOutput) -> RunnerOutput:
        if not so.seqs:
            return RunnerOutput({})
        if self.drafter is None:
            return self._run(so)
        filled = self.drafter.draft(so, self._generator)  # the draft's K/V catch up, its drafts fill the slots
        out = self._run(filled)
        out.drafted = {s.request_id: (s.spec_token_ids, s.spec_parents) for s in filled.seqs if s.spec_token_ids}
        out.steady, out.catch_up = self.drafter.steady, self.drafter.caught_up
        self.drafter.observe(out)
        out.draft_lag = self.drafter.lags([s.request_id for s in so.seqs])
        return out

    def _run(self, so: SchedulerOutput) -> RunnerOutput:
        ids, positions, meta, embeds = step_inputs(self, so)
        # a sequence's sampled rows: its last one, or with k drafts its last k + 1
        rows = [r for i, s in enumerate(so.seqs) if s.sample
                for r in range(meta.query_start_loc[i + 1] - 1 - len(s.spec_token_ids), meta.query_start_loc[i + 1])]
        drafts = sum(len(s.spec_token_ids) for s in so.seqs)
        lift = drafts and so.num_tokens - drafts < self.backend.batch_min_rows()  # a verify step's rows as decode rows
        seqs = [s for s in so.seqs if s.sample]
        targets = prompt_rows(so.seqs, meta.query_start_loc)  # SamplingParams.prompt_logprobs' rows
        pooling = pooling_rows(so.seqs, meta.query_start_loc)  # SamplingParams.pooling's rows
        with self.backend.batch_invariant(self.verify_rows if lift else 0):
            out_rows = with_prompt_rows(rows, targets, pooling)
            # [len(out_rows), hidden]; embeds: image rows over their placeholders' embeddings
            keep = getattr(self.drafter, "wants_hidden", False)  # the MTP head reads every row's (runner.mtp_drafter)
            hidden = self.model(ids, positions, meta, self.kv_caches, out_rows=None if keep else out_rows, **embeds)
            if keep:
                self.drafter.see_hidden(so.seqs, hidden, meta.query_start_loc)
                hidden = hidden[out_rows]  # [len(out_rows), hidden]
            pooled = pooled_sums(hidden, out_rows, pooling, so.seqs, getattr(self.model, "rank_head", None))
            prompt, ranks, hidden = score_prompts(hidden, out_rows, rows, targets, so.seqs,
                                                  lambda h: self._logits(h, None))
            if not rows:
                return RunnerOutput({}, prompt_logprobs=prompt, prompt_ranks=ranks, pooled=pooled)
            if len(rows) > len(seqs):
                masks, narrow = reached(seqs, self.matchers, self.cfg.vocab_size)
                scored = scored_ids([a for s in seqs for a in masks[s.request_id]] if narrow else None)
                out = self._verify(seqs, self._logits(hidden, scored), raw_known=scored is None, masks=masks)
                out.prompt_logprobs, out.prompt_ranks, out.pooled = prompt, ranks, pooled
                if meta.recurrent is not None:  # each drafting sequence's state after its accepted rows only
                    out.snapshots = keep_accepted(meta.recurrent, self.snapshots, so.seqs, out.accepted)
                return out
            allowed = matched(self.matchers, self.grammar, self.cfg.vocab_size, seqs)
            scored = scored_ids(None if len(allowed) < len(seqs)  # first: a row without a grammar scores all
                                or any(wants_raw(s, self.matchers.get(s.request_id)) for s in seqs)
                                else list(allowed.values()))
            logits = self._logits(hidden, scored)  # [R, vocab]
        for i, s in enumerate(seqs):
            if s.banned_token_ids and s.params.structured_output is None:  # a grammar's rows: in mask_row
                logits[i, s.banned_token_ids] = float("-inf")
        matchers, raw = constrain(self.matchers, seqs, logits, allowed, raw_known=scored is None)
        gens = [self._generator(s.request_id, s.params) for s in seqs]
        histories = [(s.prompt_token_ids, s.output_token_ids) for s in seqs]
        tokens, logprobs = sample(logits, [s.params for s in seqs], gens, histories,  # logprobs: None if nobody asked
                                  [self._mirostat(s.request_id, s.params) for s in seqs])
        dead = dead_ends(logits, [(i, seqs[i]) for i, _ in matchers])  # their token is none the grammar allows
        matchers = [(i, m) for i, m in matchers if seqs[i].request_id not in dead]
        picked = tokens.tolist()  # one conversion, not a tensor index and item a row
        for i, m in matchers:
            m.accept(picked[i])
        rows_lp = [None] * len(seqs) if logprobs is None else logprobs
        return RunnerOutput({s.request_id: sampled_token(s.params, picked[i], rows_lp[i], raw.get(i),
                                                         raw_known=scored is None)
                             for i, s in enumerate(seqs)},
                            forced=forced(self.matchers, (seqs[i] for i, _ in matchers), self.forced_drafts),
                            prompt_logprobs=prompt, prompt_ranks=ranks, pooled=pooled, dead_ends=dead)

    def _logits(self, hidden: torch.Tensor, scored: torch.Tensor | None) -> torch.Tensor:
        """[R, vocab] f32: every token's logits, or only scored's (the rest -inf)."""
        return (self.model.compute_logits(hidden) if scored is None else self.model.compute_logits(hidden, scored)).float()

    def _verify(self, seqs: list, logits: torch.Tensor, raw_known: bool = True,
                masks: dict[str, list[torch.Tensor]] | None = None) -> RunnerOutput:
        """Steps with drafts: each sequence's 1 + k rows, processed as plain decoding would each
        row (hearth.sample.speculative), then the accepted drafts and the bonus token. raw_known:
        False where the head scored only what the grammars allow (no raw logprobs then). masks:
        request id -> its chain rows' grammar masks where already read (grammar_rows.reached)."""
        params, histories, gens, drafts, grammar, qs = [], [], [], [], [], []
        raw: dict[int, float] | None = {} if raw_known else None  # row -> log of the mass the grammar's mask kept
        r = 0
        for s in seqs:
            k, p = len(s.spec_token_ids), s.params
            # the rows' histories, where a penalty or a bad word reads them (a word may start in the drafts)
            reads = bool(s.output_token_ids or s.prompt_token_ids or p.bad_words_token_ids)
            # row j's history holds the drafts before it: a chain's first j, a tree node's path
            paths = node_paths(s.spec_parents) if s.is_tree else [list(range(j)) for j in range(1, k + 1)]
            for j, path in enumerate([[]] + paths):
                params.append(p)
                histories.append((s.prompt_token_ids, s.output_token_ids + [s.spec_token_ids[a] for a in path])
                                 if reads else ([], []))
                if s.banned_token_ids and len(path) < s.banned_rows and p.structured_output is None:
                    logits[r + j, s.banned_token_ids] = float("-inf")  # a grammar's rows: in mask_row
            if p.structured_output is not None:
                grammar.append((s, constrain_tree(self.matchers, self.grammar, s, logits, r, raw) if s.is_tree else
                                constrain_rows(self.matchers, self.grammar, s, logits, r, raw,
                                               (masks or {}).get(s.request_id))))
            gens.append(self._generator(s.request_id, p))
            drafts.append(s.spec_token_ids)
            qs.append(None if self.drafter is None else self.drafter.probs.get(s.request_id))  # None: point masses
            r += k + 1
        want_lp = any(p.logprobs is not None for p in params)
        committed, logprobs, rows = verify(logits, params, histories, gens, drafts, want_lp, qs,
                                           [s.spec_parents for s in seqs],
                                           [self._mirostat(s.request_id, s.params) for s in seqs])
        # a row with no finite logit sampled its last token: the request ends (no matcher moves past it)
        dead = dead_ends(logits, [(rows[seqs.index(s)][-1], s) for s, _ in grammar])
        grammar = [(s, consumed) for s, consumed in grammar if s.request_id not in dead]
        for s, consumed in grammar:  # back to the accepted path, then on by the bonus token
            toks = committed[seqs.index(s)]
            m = self.matchers[s.request_id]
            if s.is_tree:  # the matcher is where it was before the step: on along the path
                for t in toks:
                    m.accept(t)
                continue
            m.rollback(consumed - (len(toks) - 1))
            m.accept(toks[-1])
        sampled, accepted = {}, {}
        for s, toks, rs in zip(seqs, committed, rows):
            res = [sampled_token(s.params, t, None if logprobs is None else logprobs[r], raw.get(r) if raw else None, raw_known)
                   for t, r in zip(toks, rs)]
            sampled[s.request_id] = res[-1]
            if s.spec_token_ids:
                accepted[s.request_id] = res[:-1]
            if s.is_tree:
                move_path(self.kv_caches, self.block_size, s, [r - rs[0] - 1 for r in rs[1:]])
        return RunnerOutput(sampled, accepted=accepted,
                            forced=forced(self.matchers, (s for s, _ in grammar), self.forced_drafts), dead_ends=dead)

    def _mirostat(self, request_id: str, params) -> MirostatState | None:
        """The request's mirostat state, started on its first sampled token; None where it runs none."""
        if not params.mirostat or params.greedy:
            return None
        if request_id not in self.mirostat:
            self.mirostat[request_id] = start(params.mirostat_tau)
        return self.mirostat[request_id]

    def _generator(self, request_id: str, params) -> torch.Generator | None:
        if params.greedy:
            return None
        if params.seed is None:
            return self._unseeded
        g = self.generators.get(request_id)
        if g is None:
            g = self.generators[request_id] = torch.Generator().manual_seed(params.seed)
        return g
