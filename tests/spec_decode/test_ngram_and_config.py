"""The n-gram prompt-lookup proposer against a brute-force rescan, and speculative_config's errors."""

from __future__ import annotations

import random

import pytest

from hearth.engine.request import Request
from hearth.errors import HearthError
from hearth.sampling_params import SamplingParams
from hearth.spec_decode.config import InvalidSpeculativeConfig, SpeculativeConfig
from hearth.spec_decode.ngram import NgramIndex, NgramProposer

from tests.spec_decode.test_copy_edits import PieceCodec


def brute_force(tokens, n_min, n_max, k):
    """The longest suffix n-gram (n_max..n_min) seen before: the tokens after its latest earlier occurrence."""
    L = len(tokens)
    for n in range(min(n_max, L - 1), n_min - 1, -1):
        suffix = tokens[L - n:]
        for e in range(L - 1, n - 1, -1):  # occurrence tokens[e - n:e], e <= L - 1
            if tokens[e - n:e] == suffix:
                return tokens[e:e + k]
    return []


@pytest.mark.parametrize("seed", range(5))
def test_incremental_index_equals_a_rescan(seed):
    rng = random.Random(seed)
    index = NgramIndex(1 + seed % 2, 3 + seed % 3)
    tokens = []
    while len(tokens) < 400:
        new = [rng.randrange(6) for _ in range(rng.randrange(1, 5))]
        tokens += new
        index.extend(new)
        assert index.propose(4) == brute_force(tokens, index.n_min, index.n_max, 4), len(tokens)


def test_proposer_reads_prompt_and_output_and_prefers_the_longest_match():
    cfg = SpeculativeConfig(num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=3)
    prop = NgramProposer(cfg)
    req = Request("r", [1, 2, 3, 4, 9, 3, 4, 7, 8], SamplingParams(), frozenset(), 100)
    req.output_token_ids = [2, 3]  # ... 2, 3 -> the 2-gram "2 3" at the start: 4, 9, 3
    assert prop.propose([req], [3]) == {"r": [4, 9, 3]}
    req.output_token_ids += [4]  # "2 3 4" occurred at the start: 9, 3, 4
    assert prop.propose([req], [3]) == {"r": [9, 3, 4]}
    req.output_token_ids += [5]  # 5 never seen: no draft
    assert prop.propose([req], [3]) == {}
    prop.forget("r")
    assert not prop.indexes


@pytest.mark.parametrize("value,field", [
    ({"method": "eagle9"}, "method"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"method": "ngram", "tree_budget": -1}, "tree_budget"),
    ({"method": "ngram", "tree_budget": 2.5}, "tree_budget"),
    ({"method": "ngram", "prompt_lookup_min": 4, "prompt_lookup_max": 2}, "prompt_lookup_max"),
    ({"method": "ngram", "num_speculative_tokens": "4"}, "num_speculative_tokens"),
    ({"method": "ngram", "draft_tokens": 4}, "draft_tokens"),
    ({"method": "ngram", "model": "qwen2.5-coder-0.5b"}, "model"),
    ({"method": "suffix", "model": "x.gguf"}, "model"),
    ({}, "method"),
    ({"num_speculative_tokens": 4}, "method"),
    ({"method": 3}, "method"),
    ('{"method": "ngram",', "JSON"),
    ("[1, 2]", "JSON object"),
    # suffix's K defaults to the tree depth: a depth of 0 was named as "num_speculative_tokens ... got 0"
    ({"method": "suffix", "suffix_decoding_max_tree_depth": 0}, "suffix_decoding_max_tree_depth must be at least 2"),
])
def test_bad_speculative_config_is_one_line_naming_the_field(value, field):
    with pytest.raises(InvalidSpeculativeConfig) as e:
        SpeculativeConfig.parse(value)
    msg = str(e.value)
    assert field in msg and "\n" not in msg


def test_good_config_from_json():
    c = SpeculativeConfig.parse('{"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_max": 4}')
    assert (c.num_speculative_tokens, c.prompt_lookup_min, c.prompt_lookup_max) == (6, 2, 4)
    assert SpeculativeConfig.parse(None) is None


def test_a_model_without_a_method_is_a_draft_model_as_in_vllm():
    """vLLM: `model` and no method is a draft model (method draft_model); hearth ran ngram and
    dropped the draft without a word."""
    c = SpeculativeConfig.parse('{"model": "qwen2.5-coder-0.5b"}')
    assert (c.method, c.model, c.k) == ("draft", "qwen2.5-coder-0.5b", 4)
    assert SpeculativeConfig.parse({"method": "draft_model", "model": "d.gguf"}) == \
        SpeculativeConfig.parse({"method": "draft", "model": "d.gguf"})
    assert SpeculativeConfig.parse({"method": None, "model": "d.gguf"}).method == "draft"
    assert "draft model d.gguf" in SpeculativeConfig.parse({"model": "d.gguf"}).summary
    with pytest.raises(InvalidSpeculativeConfig, match=r'speculative_config\.model applies to method "draft" only'):
        SpeculativeConfig.parse({"method": "ngram", "model": "d.gguf"})


def test_serve_flags_build_the_config():
    import argparse

    from hearth.commands import serve

    p = argparse.ArgumentParser()
    serve.add_arguments(p)
    args = p.parse_args(["--spec-draft-n-max", "7"])
    assert serve.speculative_config(args)["num_speculative_tokens"] == 7
    args = p.parse_args(["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'])
    assert serve.speculative_config(args)["num_speculative_tokens"] == 3
    assert serve.speculative_config(p.parse_args([])) is None
    with pytest.raises(HearthError, match="--spec-draft-n-max must be at least 1"):
        serve.speculative_config(p.parse_args(["--spec-draft-n-max", "0"]))
    got = serve.speculative_config(p.parse_args(
        ["--speculative-config", '{"method": "suffix", "suffix_decoding_max_tree_depth": 32}']))
    assert (got["method"], got["num_speculative_tokens"], got["suffix_decoding_max_tree_depth"]) == ("suffix", None, 32)
    assert SpeculativeConfig.parse(got).k == 32  # unset: the tree depth, once the context is known (fit_context)
    assert SpeculativeConfig.parse(got) == SpeculativeConfig.parse({"method": "suffix", "suffix_decoding_max_tree_depth": 32})
    with pytest.raises(InvalidSpeculativeConfig, match="suffix_decoding_max_spec_factor"):
        serve.speculative_config(p.parse_args(
            ["--speculative-config", '{"method": "suffix", "suffix_decoding_max_spec_factor": -1}']))


def test_tree_merges_earlier_continuations_best_first():
    """"1 2" occurred three times, followed by 3 4 5 9, 3 7 8 9 and (latest) 3 4 6 9: 3 is shared by
    all three, 4 by two, then the latest occurrence first on ties."""
    index = NgramIndex(2, 2)  # bigrams only: "9 1 2" would match just the last two
    index.extend([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 9, 1, 2, 3, 4, 6, 9, 1, 2])
    assert index.propose(4) == [3, 4, 6, 9]  # the chain: the latest occurrence, as before
    tree = index.propose_tree(6, 4)
    assert (tree.tokens, tree.parents) == ([3, 4, 6, 9, 7, 8], [-1, 0, 1, 2, 0, 4])
    assert tree.scores == [1.0, 2 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3]
    assert tree.chain() == [3, 4, 6, 9]
    small = index.propose_tree(3, 4)
    assert (small.tokens, small.parents) == ([3, 4, 6], [-1, 0, 1])
    wide = index.propose_tree(8, 2)  # two deep: every occurrence's first two tokens
    assert (wide.tokens, wide.parents) == ([3, 4, 7], [-1, 0, 0])


def test_proposer_offers_trees_with_a_tree_budget():
    cfg = SpeculativeConfig(num_speculative_tokens=2, tree_budget=4, prompt_lookup_min=1, prompt_lookup_max=2)
    prop = NgramProposer(cfg)
    req = Request("r", [5, 1, 5, 2, 5, 3], SamplingParams(), frozenset(), 100)
    req.output_token_ids = [5]  # "5" followed by 1, 2, 3 before: three branches at the root
    tree = prop.propose([req], [4])["r"]
    # ties go to the more recent occurrence: 3 5, then 2 5 (the oldest, 1, is left out)
    assert (tree.tokens, tree.parents) == ([3, 5, 2, 5], [-1, 0, -1, 2])


def copying(prompt, output, k=4, codec=None):
    """What the n-gram proposer drafts after each output token of a request copying its prompt."""
    prop = NgramProposer(SpeculativeConfig(num_speculative_tokens=k, prompt_lookup_min=2, prompt_lookup_max=3), codec)
    req = Request("r", prompt, SamplingParams(), frozenset(), 100)
    drafts = []
    for t in output:
        req.output_token_ids.append(t)
        drafts.append(prop.propose([req], [k]).get("r", []))
    return drafts


def test_the_copy_goes_on_past_an_edit():
    """The output copies the prompt (tokens 10..29) but for a changed span: past it, lookup alone
    has nothing (the last two tokens occur nowhere before); the cursor proposes the copy's rest."""
    src = list(range(10, 30))
    assert NgramIndex(2, 3).propose(4) == []
    renamed = copying(src, [10, 11, 12, 13, 14, 99, 16, 17])  # 15 -> 99
    assert renamed[4] == [15, 16, 17, 18] and renamed[5] == [16, 17, 18, 19]  # the copy after the 15
    assert renamed[6] == [17, 18, 19, 20]
    longer = copying(src, [10, 11, 12, 13, 14, 98, 97, 16])  # 15 -> 98 97
    assert longer[5] == [16, 17, 18, 19]  # the one-token guess...
    assert longer[6] == []  # ... wrong: wait for the copy's return
    assert longer[7] == [17, 18, 19, 20]  # 16 found after the break: copying again
    cut = copying(src, [10, 11, 12, 13, 14, 17])  # 15 16 left out
    assert cut[5] == [18, 19, 20, 21]
    index = NgramIndex(2, 3)  # the control: lookup alone after each of those edits
    index.extend(src + [10, 11, 12, 13, 14, 99])
    assert index.propose(4) == []


def test_the_copy_makes_a_rename_it_saw_at_every_later_occurrence():
    """A rename: 15 occurs three times in the copied prompt and the output writes 98 97 for it.
    Once the first occurrence resynced, the copy drafted past the next one has the rename made, so
    a draft runs through it; an occurrence the output keeps unchanged forgets the edit."""
    head = [1, 2, 3, 4, 5, 6]  # copied first: the cursor needs a run before it takes a break for an edit
    src = head + [15, 13, 14, 16, 17, 15, 18, 19, 20, 21, 15, 22, 23, 24, 25, 26, 27]
    renamed = head + [98, 97, 13, 14, 16]
    drafts = copying(src, renamed, k=8)
    assert drafts[-1] == [17, 98, 97, 18, 19, 20, 21, 98]  # both later 15s renamed in one draft
    before = copying(src, head + [98], k=8)
    assert 98 not in sum(before, [])  # nothing learned before the copy resynced
    kept = copying(src, renamed + [17, 15, 18], k=8)
    assert kept[-1] == [19, 20, 21, 15, 22, 23, 24, 25]  # the output kept a 15: the edit forgotten
    longer = copying(src, head + [15, 99, 13, 14, 16], k=8)  # 15 -> 15 99, a name made longer
    assert longer[-1] == [17, 15, 99, 18, 19, 20, 21, 15]
    index = NgramIndex(2, 3)  # the control: lookup alone drafts the copy unchanged
    index.extend(src + renamed)
    assert index.propose(8) == [17, 15, 18, 19, 20, 21, 15, 22]


def test_a_copy_found_again_keeps_the_edits_learned_before_it_was_lost():
    """15 -> 98 learned; the output then writes 8 tokens of its own (past PATIENCE: the cursor is
    dropped) and copies again: the new cursor makes the rename the lost one learned."""
    head = [1, 2, 3, 4, 5, 6]
    src = head + [15, 13, 14, 16, 17, 18, 19, 20, 21, 22, 23, 15, 24, 25, 26]
    out = head + [98, 13, 14, 16] + [50 + i for i in range(8)] + [20, 21, 22]
    assert copying(src, out, k=4)[-1] == [23, 98, 24, 25]


def test_a_learned_rename_is_made_as_text_wherever_the_word_comes_again():
    """Learned as " readings" -> " measurements" (one token each), the rename is the word edit
    "reading" -> "measurement": with the tokenizer the copy makes it in "(readings" too, a token
    the edit never saw, tokenized again ("(", "me", "asurements")."""
    codec = PieceCodec(["", "a", "b", "c", "d", "e", " readings", " measurements", "(", "readings", "):", "me",
                        "asurements", "x", "y", "z", "w"])
    head = [1, 2, 3, 4, 5, 16]  # copied first: a run before the break
    src = head + [6, 13, 14, 8, 9, 10, 15, 15]
    out = head + [7, 13, 14]  # the copy, " readings" renamed, resynced at x
    assert copying(src, out, k=6, codec=codec)[-1] == [8, 11, 12, 10, 15, 15]
    assert copying(src, out, k=6)[-1] == [8, 9, 10, 15, 15, 1]  # the control: token edits only (then the output)


def test_the_cursor_is_dropped_where_the_output_stops_copying():
    src = list(range(10, 30))
    copied = [10, 11, 12, 13, 14, 15]
    back = copying(src, copied + [50, 51, 52] + [16])  # three new tokens, then the copy again
    assert back[-1] == [17, 18, 19, 20]
    gone = copying(src, copied + [50 + i for i in range(8)] + [16])  # more than PATIENCE: dropped
    assert gone[-1] == [] and all(d == [] for d in gone[7:])
    short = copying(src, [10, 11, 60, 12])  # two tokens copied are a match, not a copy yet
    assert short[2] == [] and short[3] == []


def test_json_text_errors_name_speculative_config():
    """hearth.json_object parses it (guided_json's too): the words stay this field's own."""
    with pytest.raises(InvalidSpeculativeConfig, match=r"^speculative_config must be a JSON object, not an array$"):
        SpeculativeConfig.parse("[1, 2]")
    # JSON's words for what was written: `--speculative-config null` said "not NoneType" (a new user's trial)
    with pytest.raises(InvalidSpeculativeConfig, match=r"^speculative_config must be a JSON object, not null$"):
        SpeculativeConfig.parse("null")
    with pytest.raises(InvalidSpeculativeConfig, match=r"^speculative_config must be a JSON object, not a boolean$"):
        SpeculativeConfig.parse("true")
    with pytest.raises(InvalidSpeculativeConfig, match=r"^speculative_config is not valid JSON: .* \(at 1\)$"):
        SpeculativeConfig.parse("{")
