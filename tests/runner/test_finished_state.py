"""The runner drops an ended request's state (sampling generator, grammar matcher, KV staging slot)
when its id arrives, even where the same step then fails: the ids come once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hearth.backends.base import Backend
from hearth.config import ModelConfig
from hearth.kvstore.codecs import get_codec
from hearth.runner.messages import SchedulerOutput
from hearth.runner.model_runner import ModelRunner

NO_MODEL = SimpleNamespace(backend=Backend())  # no sequence runs: the runner asks only for the backend
CFG = ModelConfig("llama", num_layers=2, hidden_size=128, num_heads=4, num_kv_heads=2, head_dim=64,
                  intermediate_size=256, vocab_size=100, context_length=512)


def state_of(runner: ModelRunner, rid: str) -> list[str]:
    held = [name for name, table in (("generator", runner.generators), ("matcher", runner.matchers)) if rid in table]
    return held + (["staging"] if rid in runner.staging.fill else [])


@pytest.mark.parametrize("failing", ["load", "save"])
def test_a_transfer_that_raises_still_drops_the_finished_requests_state(failing):
    codec = get_codec("q8_0")  # quantized: a staging slot per request being filled
    runner = ModelRunner(NO_MODEL, CFG, 8, codec.block_size(None), codec, max_num_seqs=2)
    for rid in ("done", "running"):
        runner.generators[rid] = torch.Generator().manual_seed(1)
        runner.matchers[rid] = object()
        runner.staging._fill_slot(rid)
    bad = dict(kv_loads=[(0, b"too short")]) if failing == "load" else dict(kv_saves=[(99, b"hash")])
    with pytest.raises(Exception):  # noqa: B017  (whatever the transfer raises)
        runner.execute(SchedulerOutput([], finished_request_ids=["done"], **bad))
    assert state_of(runner, "done") == [] and state_of(runner, "running") == ["generator", "matcher", "staging"]
