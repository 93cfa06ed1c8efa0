"""llama-server's `samplers` on /completion (hearth.api.llama_chain): the samplers it leaves out do not run, as
llama.cpp's chain is built from the list; an unknown name is skipped (llama-server skips it with a warning) and named
in x-hearth-ignored-fields; a non-string entry is a 400 naming it. It was ignored whole, named only in the header."""

from __future__ import annotations

import json

import pytest

BODY = {"prompt": "hi", "n_predict": 4, "temperature": 0.5, "top_k": 7, "top_p": 0.9, "min_p": 0.1, "typical_p": 0.8,
        "repeat_penalty": 1.2, "presence_penalty": 0.3, "frequency_penalty": 0.4, "dry_multiplier": 0.5,
        "top_n_sigma": 1.5, "xtc_probability": 0.5}
ALL = {"temperature": 0.5, "top_k": 7, "top_p": 0.9, "min_p": 0.1, "typical_p": 0.8, "repetition_penalty": 1.2,
       "presence_penalty": 0.3, "frequency_penalty": 0.4, "dry_multiplier": 0.5, "top_n_sigma": 1.5,
       "xtc_probability": 0.5}
"""What BODY asks, by SamplingParams' names: every sampler on."""
NONE = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repetition_penalty": 1.0,
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0, "top_n_sigma": -1.0,
        "xtc_probability": 0.0}
"""Every sampler off: temperature 1, as llama.cpp's chain then ends in `dist` over the untempered logits."""


def sampled_with(fake, **fields) -> dict:
    r = fake.client.post("/completion", json={**BODY, **fields})
    assert r.status_code == 200, r.text
    return {k: getattr(fake.last.params, k) for k in ALL}


@pytest.mark.parametrize("samplers,on", [
    (["top_k", "temperature"], {"top_k", "temperature"}),
    ("kt", {"top_k", "temperature"}),  # llama.cpp's characters
    (["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"], set(ALL)),
    ("edskypmxt", set(ALL)),
    (["min_p", "penalties"], {"min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"}),
    ([], set()),
])
def test_the_samplers_left_out_do_not_run(fake, samplers, on):
    assert sampled_with(fake, samplers=samplers) == {k: ALL[k] if k in on else NONE[k] for k in ALL}


def test_not_given_every_sampler_runs(fake):
    assert sampled_with(fake) == ALL
    assert sampled_with(fake, samplers=None) == ALL


@pytest.mark.parametrize("samplers,named", [
    (["top_k", "nope", "temperature"], "samplers[1]"),
    ("kqt", "samplers[1]"),
])
def test_an_unknown_sampler_is_skipped_and_named(fake, samplers, named):
    r = fake.client.post("/completion", json={**BODY, "samplers": samplers})
    assert r.status_code == 200, r.text
    assert r.headers["x-hearth-ignored-fields"] == named
    p = fake.last.params
    assert (p.top_k, p.temperature, p.top_p) == (7, 0.5, 1.0)


@pytest.mark.parametrize("samplers,named", [(["top_k", "top_p", "infill"], "samplers[2]"), ("kpi", "samplers[2]"),
                                             (["adaptive_p", "top_k"], "samplers[0]")])
def test_a_list_with_a_sampler_hearth_lacks_runs_the_whole_chain(fake, samplers, named):
    """llama.vim's and llama.vscode's list leans on llama.cpp's infill sampler's truncation: without it, their code
    would be sampled at temperature 1 over 40 tokens (hearth.api.llama_chain)."""
    r = fake.client.post("/completion", json={**BODY, "samplers": samplers})
    assert r.status_code == 200 and r.headers["x-hearth-ignored-fields"] == named, r.text
    assert {k: getattr(fake.last.params, k) for k in ALL} == ALL


@pytest.mark.parametrize("samplers,field", [(["nope", 5], "samplers[1]"), ([["top_k"]], "samplers[0]"),
                                            (5, "samplers"), ({"top_k": True}, "samplers")])
def test_a_non_string_sampler_is_a_400_naming_it(fake, samplers, field):
    r = fake.client.post("/completion", json={**BODY, "samplers": samplers})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == field and error["message"].startswith(f"{field}: "), error
    assert not fake.engine.added


def test_mirostat_reads_no_list(fake):
    """llama.cpp's mirostat chain is temperature and mirostat, whatever `samplers` says."""
    r = fake.client.post("/completion", json={**BODY, "mirostat": 2, "samplers": ["top_k", "nope"]})
    assert r.status_code == 200 and r.headers["x-hearth-ignored-fields"] == "samplers[1]"
    assert (fake.last.params.mirostat, fake.last.params.temperature) == (2, 0.5)


@pytest.mark.parametrize("samplers,named", [
    (None, ["penalties", "dry", "temperature", "top_n_sigma", "min_p", "top_k", "typ_p", "top_p", "xtc"]),
    (["temperature", "top_k", "nope"], ["temperature", "top_k"]),  # hearth's order; the unknown name skipped
    ("xkd", ["dry", "top_k", "xtc"]),
    ([], []),
    (["top_k", "top_p", "infill"], ["penalties", "dry", "temperature", "top_n_sigma", "min_p", "top_k", "typ_p",
                                    "top_p", "xtc"]),  # the whole chain ran
])
@pytest.mark.parametrize("stream", [False, True])
def test_the_reply_names_the_samplers_that_ran(fake, samplers, named, stream):
    """llama-server's generation_settings.samplers: the names of the chain the request ran."""
    body = {**BODY, "stream": stream} if samplers is None else {**BODY, "stream": stream, "samplers": samplers}
    r = fake.client.post("/completion", json=body)
    assert r.status_code == 200, r.text
    last = json.loads(r.text.strip().split("\n\n")[-1].removeprefix("data: ")) if stream else r.json()
    assert last["generation_settings"]["samplers"] == named
