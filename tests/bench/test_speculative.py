"""`hearth bench` with speculative decoding: the acceptance length (output tokens per target
forward of a sequence) from the engine's spec-decode counters, and the decode ceiling scaled by it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from hearth.bench.ceiling import level_ceiling
from hearth.bench.metrics.levels import speculative_summary
from hearth.bench.report import _policy_text, policy_text
from hearth.cli import main
from tests.gguf_factory import write_tiny_gguf


def test_acceptance_length_counts_every_forward_that_yields_output():
    # 100 tokens, 60 of them accepted drafts: 40 forwards (each its own token), 2.5 tokens a forward
    s = speculative_summary({"drafts": 20, "draft_tokens": 80, "accepted_tokens": 60}, 100)
    assert s["acceptance_length"] == 2.5 and s["acceptance_length_drafted"] == 4.0
    assert speculative_summary(None, 100) is None
    assert speculative_summary({"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0}, 10)["acceptance_length"] == 1


def test_ceiling_is_the_one_token_ceiling_times_the_acceptance_length():
    roof = SimpleNamespace(decode_tok_s=lambda ctx, c: 50.0 * c, decode_step_bytes=lambda ctx, c: 10**9,
                           device=SimpleNamespace(bandwidth=50e9, source="datasheet"))
    lv = {"mean_output_tokens": 100, "mean_prompt_tokens": 20, "concurrency": 1, "output_tok_s": 60.0,
          "decode_tok_s": {"p50": 75.0}}
    plain = level_ceiling(roof, lv)
    spec = level_ceiling(roof, {**lv, "speculative": {"acceptance_length": 2.5}})
    assert plain["tok_s_per_sequence"] == 50 and plain["pct"] == 150  # over the one-token ceiling
    assert spec["tok_s_per_sequence"] == 125 and spec["pct"] == 60 and spec["acceptance_length"] == 2.5
    assert "acceptance length 2.50" in spec["reason"]


def test_the_policy_line_splits_the_pauses_as_metrics_does():
    """The pauses' two reasons (hearth.api.metrics' paused_failing, paused_not_paying) summed over the
    levels; a results.json from before the split (the total alone) still reads."""
    lv = {"steps": 10, "steps_drafting": 4, "steps_batch_off": 1, "paused": 5, "paused_failing": 2,
          "paused_not_paying": 3}
    text = _policy_text([{"speculative": lv}, {"speculative": {**lv, "paused_failing": 0, "paused_not_paying": 5}},
                         {"speculative": None}])
    assert text == ("; policy: drafts on in 40% of 20 decode steps, off for the batch size in 10%, 10 request-steps "
                    "paused (2 as the drafts kept failing, 8 as they would not pay)")
    old = {k: lv[k] for k in ("steps", "steps_drafting", "steps_batch_off", "paused")}
    assert policy_text(old).endswith(", 5 request-steps paused")
    assert _policy_text([{"speculative": old}, {"speculative": lv}]).endswith(", 10 request-steps paused")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench-model") / "tiny.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0", context=2048)  # quantized: the native kernels, which speculate
    return path


def test_bench_with_suffix_speculation_reports_acceptance_length(tiny, tmp_path, capsys):
    code = main(["bench", "--model", str(tiny), "--requests", "2", "--concurrency", "1", "--max-tokens", "48",
                 "--ignore-eos", "--ctx", "2048", "--threads", "1", "--device", "h200", "--output", str(tmp_path),
                 "--speculative-config", '{"method": "suffix"}'])
    assert code == 0
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "results.json").read_text())
    if results["speculative_decoding"] is None:
        pytest.skip("speculation is off here (torch tier)")
    assert results["speculative_decoding"]["method"] == "suffix"
    (lv,) = results["levels"]
    spec = lv["speculative"]
    assert spec["accepted_tokens"] > 0, spec  # a tiny random model's greedy output repeats itself
    assert lv["decode_ceiling"]["acceptance_length"] == spec["acceptance_length"] == results["acceptance_length"]
    assert spec["acceptance_length"] == lv["output_tokens"] / (lv["output_tokens"] - spec["accepted_tokens"])
    assert f"acceptance length {results['acceptance_length']:.2f} tokens per forward (suffix" in out
    assert spec["paused"] == spec["paused_failing"] + spec["paused_not_paying"], spec
    assert (f"{spec['paused']:,} request-steps paused ({spec['paused_failing']:,} as the drafts kept failing, "
            f"{spec['paused_not_paying']:,} as they would not pay)") in out


def test_speculative_config_errors_are_one_line(tiny, tmp_path, capsys):
    code = main(["bench", "--model", str(tiny), "--output", str(tmp_path),
                 "--speculative-config", '{"method": "suffix", "suffix_decoding_min_token_prob": 2}'])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and "suffix_decoding_min_token_prob" in err[-1]
    code = main(["bench", "--url", "http://127.0.0.1:9", "--output", str(tmp_path),
                 "--speculative-config", '{"method": "suffix"}'])
    assert code == 1 and "--speculative-config" in capsys.readouterr().err
