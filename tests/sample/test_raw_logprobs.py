"""Raw logprobs beside the masked ones (SamplingParams.raw_logprobs): a grammar-constrained row's
logprobs are over the tokens the grammar allows; its raw logprob is the same token's before the mask.
The tool guard's decline gate (hearth.tool_guard.declined) reads raw / masked at each of a call's
name tokens (the share of the model's probability on what the grammar allowed).

A fake model whose logits are fixed per step, a fake grammar that allows a fixed set, and a real
ModelRunner in between: the call is `{"name": "` then one name token, which the grammar bends to an
offered tool (allowed: GET, SET) when the model wanted CALC (a tool nobody offered)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hearth.backends.base import Backend
from hearth.config import ModelConfig
from hearth.engine.engine_core import EngineCore
from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.scheduler import Scheduler
from hearth.runner.messages import SampledToken, ScheduledSequence, SchedulerOutput
from hearth.runner.model_runner import ModelRunner
from hearth.sampling_params import InvalidSamplingParams, SamplingParams, StructuredOutput
from hearth.tool_guard.confidence import TokenTrace
from hearth.tool_guard.declined import NAME_FLOOR, overridden

from tests.engine.fakes import CountingRunner, LetterTokenizer
from tests.engine.test_scheduler import run_all

V = 8
OPEN, GET, SET, CALC = 1, 2, 3, 5
PIECES = {OPEN: b'<tool_call>\n{"name": "', GET: b"get_weather", SET: b"set_alarm", CALC: b"calc_area"}
CFG = ModelConfig("llama", num_layers=1, hidden_size=4, num_heads=1, num_kv_heads=1, head_dim=4,
                  intermediate_size=8, vocab_size=V, context_length=64)
# the model's logits for the name token: it meant CALC (p ~ 0.99 raw), or it meant GET
MEANT_CALC = [0.0, 0.0, 2.0, 1.0, 0.0, 9.0, 0.0, 0.0]
MEANT_GET = [0.0, 0.0, 9.0, 1.0, 0.0, 2.0, 0.0, 0.0]


class FixedModel(torch.nn.Module):
    """Every sampled row's logits: `rows` in order (one per row of the step)."""

    def __init__(self, rows: list[list[float]]):
        super().__init__()
        self.backend = Backend()
        self.rows = torch.tensor(rows)  # [R, V]

    def forward(self, ids, positions, meta, kv_caches, out_rows):
        return torch.zeros(len(out_rows), 1)

    def compute_logits(self, hidden):
        return self.rows[: len(hidden)].clone()


class AllowedSet:
    """A grammar that allows the same tokens at every step (a call's name: offered tools only)."""

    error = None  # it never gives up (GrammarMatcher.error)

    def __init__(self, allowed: set[int]):
        self.allowed = allowed

    def matcher(self, so):
        return self

    def bitmask(self) -> bytes:
        return sum(1 << t for t in self.allowed).to_bytes(4, "little")

    def accept(self, t: int) -> bool:
        assert t in self.allowed
        return True

    def valid_prefix(self, tokens: list[int]) -> int:
        n = 0
        while n < len(tokens) and tokens[n] in self.allowed:
            n += 1
        return n

    def rollback(self, n: int) -> None:
        pass


def log_softmax(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x - x.max() - np.log(np.exp(x - x.max()).sum())


def step(rows: list[list[float]], raw: bool, drafts: list[int] = ()):
    """One decode step of one constrained greedy request -> RunnerOutput."""
    runner = ModelRunner(FixedModel(rows), CFG, 4, 16, grammar=AllowedSet({GET, SET}), max_num_seqs=1)
    params = SamplingParams(temperature=0, logprobs=0, raw_logprobs=raw,
                            structured_output=StructuredOutput(regex="x"))
    seq = ScheduledSequence("a", [OPEN], 3, [0], True, params, [], spec_token_ids=list(drafts))
    return runner.execute(SchedulerOutput([seq]))


def gate(token) -> float | None:
    """The decline gate on the call `{"name": "` + the sampled name token."""
    trace = TokenTrace(PIECES.__getitem__)
    trace.add(PIECES[OPEN].decode(), [OPEN], [{OPEN: 0.0}], [0.0])
    raw = None if token.raw_logprob is None else [token.raw_logprob]
    trace.add(PIECES[token.token_id].decode(), [token.token_id], [{token.token_id: token.logprob}], raw)
    return overridden(trace, (0, len(trace.text.encode())))


def test_a_bent_name_reads_high_masked_and_low_raw_and_is_declined():
    tok = step([MEANT_CALC], raw=True).sampled["a"]
    assert tok.token_id == GET  # the grammar's best allowed token
    assert tok.logprob == pytest.approx(log_softmax([2.0, 1.0])[0], abs=1e-5)  # p ~ 0.73 over GET, SET
    assert tok.raw_logprob == pytest.approx(log_softmax(MEANT_CALC)[GET], abs=1e-5)  # p ~ 0.0009
    assert np.exp(tok.raw_logprob) < NAME_FLOOR < np.exp(tok.logprob)
    # declined: the gate reads the share of the model's probability on what the grammar allowed (GET
    # and SET, ~0.0012 of it): raw / masked
    assert gate(tok) == pytest.approx(np.exp(tok.raw_logprob - tok.logprob), rel=1e-2) and gate(tok) < NAME_FLOOR


def test_a_name_the_model_chose_reads_high_raw_and_stays_a_call():
    tok = step([MEANT_GET], raw=True).sampled["a"]
    assert tok.token_id == GET
    assert tok.raw_logprob == pytest.approx(log_softmax(MEANT_GET)[GET], abs=1e-5)  # p ~ 0.999
    assert tok.raw_logprob <= tok.logprob  # over fewer tokens, the masked one is never lower
    assert gate(tok) is None  # kept


def test_raw_logprob_is_none_unless_asked():
    tok = step([MEANT_CALC], raw=False).sampled["a"]
    assert tok.raw_logprob is None and tok.logprob == pytest.approx(log_softmax([2.0, 1.0])[0], abs=1e-5)
    # without raw logprobs the gate reads the masked probability: this bent name passes as a call
    assert gate(tok) is None


def test_raw_logprobs_need_logprobs():
    with pytest.raises(InvalidSamplingParams, match="raw_logprobs needs logprobs"):
        SamplingParams(raw_logprobs=True)


def test_an_unconstrained_rows_raw_logprob_is_its_logprob():
    runner = ModelRunner(FixedModel([MEANT_CALC]), CFG, 4, 16, max_num_seqs=1)
    seq = ScheduledSequence("a", [OPEN], 3, [0], True, SamplingParams(temperature=0, logprobs=0, raw_logprobs=True), [])
    tok = runner.execute(SchedulerOutput([seq])).sampled["a"]
    assert tok.token_id == CALC and tok.raw_logprob == tok.logprob


def test_verified_drafts_carry_their_rows_raw_logprobs():
    """With drafts (speculative decoding), each committed token's raw logprob is its own row's."""
    out = step([MEANT_GET, MEANT_CALC], raw=True, drafts=[GET])
    (acc,), bonus = out.accepted["a"], out.sampled["a"]
    assert (acc.token_id, bonus.token_id) == (GET, GET)
    assert acc.raw_logprob == pytest.approx(log_softmax(MEANT_GET)[GET], abs=1e-5)
    assert bonus.raw_logprob == pytest.approx(log_softmax(MEANT_CALC)[GET], abs=1e-5)
    assert bonus.logprob == pytest.approx(log_softmax([2.0, 1.0])[0], abs=1e-5)


class RawRunner(CountingRunner):
    """The counting runner, reporting logprob -0.1 and, where asked, raw logprob -3.0 per token."""

    def execute(self, so: SchedulerOutput):
        out = super().execute(so)
        for s in so.seqs:
            if s.request_id in out.sampled:
                raw = -3.0 if s.params.raw_logprobs else None
                out.sampled[s.request_id] = SampledToken(out.sampled[s.request_id].token_id, -0.1, {}, raw)
        return out


def test_engine_outputs_carry_raw_logprobs_only_where_asked():
    sched = Scheduler(KVCacheManager(16, 4), 4, 16)
    engine = EngineCore(sched, RawRunner(), LetterTokenizer(), 64, 50)
    engine.add_request([1, 2], SamplingParams(max_tokens=2, temperature=0, logprobs=0, raw_logprobs=True), "raw")
    engine.add_request([1, 2], SamplingParams(max_tokens=2, temperature=0, logprobs=0), "plain")
    outs = run_all(engine)
    assert [o.new_raw_logprobs for o in outs["raw"]] == [[-3.0], [-3.0]]
    assert [o.new_logprobs for o in outs["raw"]] == [[{3: -0.1}], [{4: -0.1}]]
    assert [o.new_raw_logprobs for o in outs["plain"]] == [None, None]
