"""`hearth serve --speculative-config`: the server starts, answers greedy requests with the same text
as the plain server, and /metrics carries the spec-decode counters. (The engine-level losslessness
tests are in tests/spec_decode; this one catches what only a real server process runs.)"""

from __future__ import annotations

import json

import pytest

from hearth.kernels import tiers
from tests.server.conftest import launch, stop
from tests.server.test_real_server import metrics

# a list whose continuation repeats earlier text, so prompt lookup has something to draft
PROMPT = "Count: one two three four five six seven eight. Again: one two three four five six seven eight. Again:"


@pytest.fixture(scope="module")
def spec_server(model_path, tmp_path_factory):
    log = tmp_path_factory.mktemp("spec-server") / "server.log"
    proc, server = launch(model_path("smollm2-135m"), log, "--max-model-len", "512",
                          "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 4}))
    try:
        yield server
    finally:
        stop(proc)


def test_speculative_server_answers_as_the_plain_one(spec_server, real_server):
    body = dict(prompt=PROMPT, max_tokens=24, temperature=0)
    want = real_server.openai().completions.create(model=real_server.model, **body).choices[0].text
    got = spec_server.openai().completions.create(model=spec_server.model, **body).choices[0].text
    assert got == want
    m = metrics(spec_server.http())
    if tiers.active() == "torch":  # speculation is off there (hearth/llm.py says why)
        assert "hearth:spec_decode_num_drafts_total" not in m
    else:
        assert m["hearth:spec_decode_num_drafts_total"] > 0
        assert m["hearth:spec_decode_num_accepted_tokens_total"] > 0
