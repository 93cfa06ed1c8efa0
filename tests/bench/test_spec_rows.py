"""The speculative benchmark's pure parts (hearth/bench/spec): acceptance length, the rows'
comparisons (equal to plain greedy, ratios to hearth plain and to llama.cpp's best), the table,
the variant JSON, the /metrics parser and the prompts, all without a server."""

from __future__ import annotations

import pytest

from hearth.bench import BenchError, corpus
from hearth.bench.spec import prompts, table, variants
from hearth.bench.spec.client import Sample, counter_delta, parse_spec_counters
from hearth.bench.spec.rows import acceptance_length, compare, sample_row, text_sha

RUN = {"commit": "abc", "cpu": "cpu", "cpu_tier": "avx512", "threads": 2, "max_tokens": 8, "model": "t.gguf",
       "model_sha256": "a" * 64, "draft": "d.gguf", "draft_sha256": "b" * 64, "load_avg_1m": 0.5}


def _row(engine, name, workload, sight, tok_s, text="same", error=None):
    return {"engine": engine, "config_name": name, "workload": workload, "sight": sight, "decode_tok_s": tok_s,
            "text_sha": text_sha(text), "error": error}


@pytest.mark.parametrize("tokens, accepted, want", [
    (33, 0, 1.0),        # plain: one token per forward
    (33, 24, 4.0),       # 32 decode tokens in 8 forwards
    (1, 0, None),        # the prefill made the only token
    (None, 3, None), (10, None, None),
])
def test_acceptance_length(tokens, accepted, want):
    assert acceptance_length(tokens, accepted) == want


def test_compare_equality_and_ratios():
    rows = [_row("hearth", "plain", "edit", "first", 10.0), _row("hearth", "plain", "edit", "repeat", 12.0),
            _row("hearth", "ngram", "edit", "first", 30.0), _row("hearth", "ngram", "edit", "repeat", 36.0, "other"),
            _row("llama.cpp", "plain", "edit", "first", 8.0, "llama text"),
            _row("llama.cpp", "ngram-mod", "edit", "first", 15.0, "llama text"),
            _row("llama.cpp", "ngram-mod", "edit", "repeat", 40.0, "changed"),
            _row("hearth", "ngram", "chat", "first", 9.0),  # no hearth plain, no llama.cpp on chat
            _row("hearth", "draft", "edit", "first", None, error="HTTP 500")]
    out = {(r["engine"], r["config_name"], r["workload"], r["sight"]): r for r in compare(rows)}

    # text: against the same engine's plain greedy at first sight, never across engines
    assert out["hearth", "ngram", "edit", "first"]["equal"] is True
    assert out["hearth", "ngram", "edit", "repeat"]["equal"] is False
    assert out["llama.cpp", "ngram-mod", "edit", "first"]["equal"] is True
    assert out["llama.cpp", "ngram-mod", "edit", "repeat"]["equal"] is False
    assert out["hearth", "ngram", "chat", "first"]["equal"] is None
    assert out["hearth", "draft", "edit", "first"]["equal"] is None

    # ratios: same workload and sight; llama.cpp's best is its fastest row there
    ngram = out["hearth", "ngram", "edit", "first"]
    assert ngram["vs_hearth_plain"] == 3.0 and ngram["vs_llama_best"] == 2.0 and ngram["llama_best"] == "ngram-mod"
    rep = out["hearth", "ngram", "edit", "repeat"]
    assert rep["vs_hearth_plain"] == 3.0 and rep["vs_llama_best"] == 36.0 / 40.0
    assert out["llama.cpp", "plain", "edit", "first"]["vs_llama_best"] == 8.0 / 15.0
    chat = out["hearth", "ngram", "chat", "first"]
    assert chat["vs_hearth_plain"] is None and chat["vs_llama_best"] is None and chat["llama_best"] is None
    assert out["hearth", "draft", "edit", "first"]["vs_hearth_plain"] is None


def _sample(**kw) -> Sample:
    base = dict(text="x", completion_tokens=33, prompt_tokens=100, start=0.0, first=2.0, last=10.0, end=10.5)
    return Sample(**{**base, **kw})


def test_sample_row_hearth_counters_and_llama_timings():
    hearth = variants.Variant("hearth", "ngram", {"method": "ngram"})
    row = sample_row(_sample(counters={"num_accepted_tokens": 24.0, "num_draft_tokens": 30.0, "num_drafts": 8.0}),
                     hearth, "edit", "first", RUN)
    assert row["decode_tok_s"] == 32 / 8.0 and row["e2e_tok_s"] == 33 / 10.5 and row["ttft_s"] == 2.0
    assert (row["accepted"], row["draft_tokens"], row["drafts"], row["acceptance_len"]) == (24.0, 30.0, 8.0, 4.0)
    assert "draft_sha256" not in row and row["commit"] == "abc" and row["text"] == "x"

    llama = variants.Variant("llama.cpp", "draft-simple", ["-md", variants.DRAFT])
    timings = {"draft_n": 20, "draft_n_accepted": 16, "predicted_per_second": 5.5}
    row = sample_row(_sample(timings=timings), llama, "edit", "repeat", RUN)
    assert row["accepted"] == 16 and row["draft_tokens"] == 20 and row["acceptance_len"] == 2.0
    assert row["server_decode_tok_s"] == 5.5 and row["draft_sha256"] == "b" * 64

    # plain: no counters exported means nothing drafted; a spec variant without counters is unknown
    plain = sample_row(_sample(), variants.Variant("hearth", "plain", None), "edit", "first", RUN)
    assert plain["acceptance_len"] == 1.0
    assert sample_row(_sample(), hearth, "edit", "first", RUN)["acceptance_len"] is None
    assert sample_row(_sample(completion_tokens=1, first=2.0, last=2.0), hearth, "e", "first", RUN)["decode_tok_s"] is None


def test_table_has_one_section_per_workload():
    rows = compare([_row("hearth", "plain", "edit", "first", 10.0), _row("llama.cpp", "plain", "edit", "first", 5.0),
                    _row("hearth", "plain", "chat", "first", 9.0), _row("hearth", "ngram", "chat", "first", None,
                                                                       error="HTTP 500: boom")])
    for r in rows:
        r.update(tokens=8, e2e_tok_s=1.0, ttft_s=0.5, acceptance_len=1.0, accepted=0, draft_tokens=0)
    text = table.markdown(rows, RUN)
    lines = text.splitlines()
    assert lines[0].startswith("**Conditions:** hearth commit abc, CPU") and "2 threads per engine" in lines[0]
    assert [ln for ln in lines if ln.startswith("### ")] == ["### edit", "### chat"]
    assert "| hearth plain | first | 8 | 10.0 | 1.0 | 0.50 | 1.00 | - | yes | 1.00x | 2.00x (plain) |" in lines
    assert "| llama.cpp plain | first | 8 | 5.0 | 1.0 | 0.50 | 1.00 | - | yes | 0.50x | 1.00x |" in lines
    assert any(ln.startswith("| hearth ngram | first | error: HTTP 500: boom |") for ln in lines)
    sections = text.split("### ")
    assert sections[0].count("| edit | first |") == 1 and sections[0].count("| chat | first |") == 1  # the summary
    assert all(ln.count("|") == len(table.HEADER) + 1 for s in sections[1:] for ln in s.splitlines()
               if ln.startswith("| "))


def test_variants_from_json():
    got = variants.parse_variants("hearth", '{"plain": null, "tree": {"method": "draft", "tree_budget": 16}}', {}, "--h")
    assert [(v.label, v.config) for v in got] == [("hearth plain", None),
                                                  ("hearth tree", {"method": "draft", "tree_budget": 16})]
    assert variants.parse_variants("llama.cpp", "", variants.DEFAULT_LLAMA, "--l") == []
    assert [v.name for v in variants.parse_variants("llama.cpp", None, variants.DEFAULT_LLAMA, "--l")] == [
        "plain", "draft-simple", "ngram-simple", "ngram-mod", "ngram-cache"]
    for engine, text, msg in [("hearth", "{", "--x is not valid JSON"), ("hearth", "[]", "must be a JSON object"),
                              ("hearth", '{"a": []}', "'a' must be a speculative_config object or null"),
                              ("llama.cpp", '{"a": {}}', "'a' must be a list of arguments"),
                              ("llama.cpp", '{"a": [1]}', "'a' must list strings")]:
        with pytest.raises(BenchError, match=msg):
            variants.parse_variants(engine, text, {}, "--x")
    both = variants.parse_variants("hearth", None, variants.DEFAULT_HEARTH, "-")
    assert [v.name for v in variants.select(both, "hearth draft, hearth plain")] == ["draft", "plain"]
    with pytest.raises(BenchError, match="--only: no variant 'hearth nope'"):
        variants.select(both, "hearth nope")


def test_commands_use_the_same_files_and_threads(tmp_path):
    launch = variants.Launch(tmp_path / "t.gguf", tmp_path / "d.gguf", 2, tmp_path / "llama-server", "py")
    draft = variants.Variant("hearth", "draft", variants.DEFAULT_HEARTH["draft"])
    cmd = variants.hearth_command(draft, launch, 1234)
    assert cmd[:5] == ["py", "-m", "hearth", "serve", str(tmp_path / "t.gguf")]
    assert cmd[cmd.index("--threads") + 1] == "2" and cmd[cmd.index("--port") + 1] == "1234"
    assert f'"model": "{tmp_path / "d.gguf"}"' in cmd[cmd.index("--speculative-config") + 1]
    assert "--speculative-config" not in variants.hearth_command(variants.Variant("hearth", "plain", None), launch, 1)
    llama = variants.llama_command(variants.Variant("llama.cpp", "d", ["--spec-type", "draft-simple", "-md", "{draft}"]),
                                   launch, 99)
    assert llama[0] == str(tmp_path / "llama-server") and llama[-4:] == ["--spec-type", "draft-simple", "-md",
                                                                         str(tmp_path / "d.gguf")]
    assert all(llama[llama.index(f) + 1] == "2" for f in ("-t", "-tb", "-td", "-tbd"))


def test_spec_counters_from_both_servers_metrics():
    text = ('# HELP hearth:spec_decode_num_drafts_total x\n'
            'hearth:spec_decode_num_drafts_total{model_name="m"} 3.0\n'
            'hearth:spec_decode_num_accepted_tokens_total{model_name="m"} 7.0\n'
            'hearth:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 5.0\n'
            'llamacpp:spec_decode_num_draft_tokens_total 12\n'
            'llamacpp:tokens_predicted_total 100\n')
    assert parse_spec_counters(text) == {"num_drafts": 3.0, "num_accepted_tokens": 7.0, "num_draft_tokens": 12.0}
    assert counter_delta({"num_drafts": 1.0}, {"num_drafts": 3.0, "num_accepted_tokens": 2.0}) == {
        "num_drafts": 2.0, "num_accepted_tokens": 2.0}


def test_prompts_ship_with_the_package():
    assert prompts.names() == ("code-edit", "code-gen", "chat", "drafts-fail")
    edit = prompts.spec_prompt("code-edit")
    system, user = edit.messages
    assert system["role"] == "system" and user["role"] == "user"
    assert "class Reading:" in user["content"] and "Rename the class `Reading`" in user["content"]
    assert 35 <= user["content"].count("\n") <= 60  # a ~40-line file, shown whole
    compile(corpus.code_file("readings.py.txt"), "readings.py", "exec")  # real, valid Python
    with pytest.raises(BenchError, match="unknown workload 'x'; known: code-edit, code-gen, chat, drafts-fail"):
        prompts.spec_prompt("x")


def test_summary_names_each_engines_fastest_variant():
    rows = compare([_row("hearth", "plain", "edit", "first", 10.0), _row("hearth", "ngram", "edit", "first", 30.0),
                    _row("llama.cpp", "plain", "edit", "first", 8.0, "l"),
                    _row("llama.cpp", "ngram-mod", "edit", "first", 12.0, "changed"),
                    _row("hearth", "ngram", "chat", "repeat", 9.0)])
    assert table.summary(rows)[2:] == [
        "| edit | first | 10.0 | 30.0 (ngram) | 12.0 (ngram-mod, text changed) | 2.50x |",
        "| chat | repeat | - | 9.0 (ngram) | - | - |"]
