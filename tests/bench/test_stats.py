"""Percentiles and level summaries against numbers worked out by hand."""

from __future__ import annotations

import pytest

from hearth.bench.metrics.levels import level_summary
from hearth.bench.metrics.stats import percentile, summarize
from hearth.bench.records import LevelRun, RequestResult


@pytest.mark.parametrize("values, q, expected", [
    ([1, 2, 3, 4], 50, 2.5),             # between ranks 2 and 3
    ([4, 1, 3, 2], 50, 2.5),             # order does not matter
    ([10, 20, 30, 40, 50], 50, 30),      # the middle rank exactly
    ([10, 20, 30, 40, 50], 90, 46),      # rank 0.9 * 4 = 3.6: 40 + 0.6 * 10
    ([10, 20, 30, 40, 50], 99, 49.6),    # rank 3.96
    ([10, 20, 30, 40, 50], 1, 10.4),     # rank 0.04
    ([10, 20, 30, 40, 50], 0, 10),
    ([10, 20, 30, 40, 50], 100, 50),
    ([7], 99, 7),
    ([0.1, 0.5], 75, 0.4),               # rank 0.75: 0.1 + 0.75 * 0.4
])
def test_percentile(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_matches_numpy():
    np = pytest.importorskip("numpy")
    values = [0.3, 9.1, 2.2, 4.4, 4.4, 7.0, 1.5]
    for q in (1, 25, 50, 90, 99):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_rejects_nonsense():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summarize():
    s = summarize([1, 2, 3, 4])
    assert s == {"n": 4, "mean": 2.5, "min": 1, "max": 4, "p1": pytest.approx(1.03), "p50": 2.5,
                 "p90": pytest.approx(3.7), "p99": pytest.approx(3.97)}
    assert summarize([]) is None


def _result(index, start, chunks, prompt=10, usage=None, error=None):
    r = RequestResult(index, 2, "sha", start=start, prompt_tokens=prompt, usage_output_tokens=usage, error=error)
    for t in chunks:
        r.add_chunk(t, "x", tokens=1)
    r.end = chunks[-1] + 0.5 if chunks else start + 1
    return r


def test_request_metrics():
    r = _result(0, 10.0, [10.5, 10.7, 11.0, 11.5])
    assert r.ttft == pytest.approx(0.5)
    assert r.itls == pytest.approx([0.2, 0.3, 0.5])
    assert r.output_tokens == 4
    assert r.decode_tok_s == pytest.approx(3 / 1.0)    # 3 tokens after the first, in 1.0 s
    assert r.latency == pytest.approx(2.0)
    assert _result(1, 0.0, [1.0]).decode_tok_s is None  # one token: no decode speed
    # the server's usage count wins over the chunk count (a chunk may carry several tokens)
    assert _result(2, 0.0, [1.0, 2.0], usage=5).decode_tok_s == pytest.approx(4.0)


def test_level_summary():
    a = _result(0, 0.0, [1.0, 1.5, 2.0])              # ttft 1, itl .5 .5, 2 tok/s, latency 2.5
    b = _result(1, 0.0, [2.0, 2.25, 2.5, 3.0], 30)    # ttft 2, itl .25 .25 .5, 3 tok/s, latency 3.5
    failed = _result(2, 0.0, [], error="HTTP 500: boom")
    s = level_summary(LevelRun(2, [a, b, failed], 0.0, 4.0))
    assert (s["requests"], s["failed"], s["errors"]) == (3, 1, ["HTTP 500: boom"])
    assert (s["prompt_tokens"], s["output_tokens"]) == (40, 7)
    assert s["output_tok_s"] == pytest.approx(7 / 4) and s["total_tok_s"] == pytest.approx(47 / 4)
    assert s["requests_per_s"] == pytest.approx(0.5)
    assert (s["mean_prompt_tokens"], s["mean_output_tokens"]) == (20, 3.5)
    assert s["ttft_s"]["p50"] == pytest.approx(1.5) and s["ttft_s"]["max"] == 2.0
    assert s["itl_s"]["n"] == 5 and s["itl_s"]["p50"] == pytest.approx(0.5)   # .25 .25 .5 .5 .5
    assert s["decode_tok_s"]["p50"] == pytest.approx(2.5)
    assert s["latency_s"]["mean"] == pytest.approx(3.0)
