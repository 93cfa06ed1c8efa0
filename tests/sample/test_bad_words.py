"""vLLM's bad_words (hearth.sample.bad_words): a word's token sequences by vLLM's rule, its last token banned
where the tokens before it were just generated, in the sampler and in speculative verification (a banned draft
is rejected: greedy with drafts == greedy without); a word that is not a list of words is refused by name."""

from __future__ import annotations

import pytest
import torch

from hearth.sample.bad_words import banned_last_tokens, history_needed, word_token_ids
from hearth.sample.sampler import sample
from hearth.sample.speculative import verify
from hearth.sampling_params import InvalidSamplingParams, SamplingParams

V = 8


def encode(text: str) -> list[int]:
    """A made-up tokenizer: "ab" -> [1, 2], " ab" -> [5, 2] (a spaced first token), "cd" -> [3, 4],
    " cd" -> [6, 3, 4] (the space a token of its own: not the same length), "e" -> [7], " e" -> [7]."""
    return {"ab": [1, 2], " ab": [5, 2], "cd": [3, 4], " cd": [6, 3, 4], "e": [7], " e": [7]}[text]


def test_a_words_sequences_are_vllms():
    """Plain, and spaced where that changes the first token and keeps the count (update_from_tokenizer)."""
    assert word_token_ids(["ab", " cd", "e"], encode) == [[1, 2], [5, 2], [3, 4], [7]]
    assert history_needed([[1, 2], [7]]) == 1 and history_needed([]) == 0


@pytest.mark.parametrize("output, banned", [([], [7]), ([1], [2, 7]), ([0, 1], [2, 7]), ([1, 0], [7]),
                                            ([3, 2, 1], [2, 7]), ([1, 2], [7])])
def test_the_last_token_is_banned_where_the_rest_was_just_generated(output, banned):
    assert banned_last_tokens([[1, 2], [7]], output) == banned


def test_the_sampler_bans_by_the_rows_history():
    """Greedy rows whose maximum is 2: after a 1 it is banned (the next maximum, 4, is taken), else not."""
    p = SamplingParams(temperature=0, bad_words=["ab"], bad_words_token_ids=[[1, 2]])
    logits = torch.tensor([[0.0, 1, 3, 0, 2, 0, 0, 0]] * 2)
    tokens, _ = sample(logits.clone(), [p, p], [None, None], [([], [1]), ([], [3])])
    assert tokens.tolist() == [4, 2]


def test_a_banned_draft_is_rejected_and_greedy_equals_plain_decoding():
    """Drafts [1, 2] spell the word; row 1 (after the draft 1) bans 2, so the draft 2 is rejected and the row's
    next maximum is committed, as plain decoding would: row 0 -> 1, then (2 banned) 4."""
    p = SamplingParams(temperature=0, bad_words=["ab"], bad_words_token_ids=[[1, 2]])
    logits = torch.tensor([[0.0, 3, 1, 0, 0, 0, 0, 0], [0.0, 1, 3, 0, 2, 0, 0, 0], [0.0] * V])
    out, _, _ = verify(logits.clone(), [p] * 3, [([], [0]), ([], [0, 1]), ([], [0, 1, 2])], [None], [[1, 2]], False)
    assert out == [[1, 4]]
    plain = SamplingParams(temperature=0)
    out, _, _ = verify(logits.clone(), [plain] * 3, [([], [0]), ([], [0, 1]), ([], [0, 1, 2])], [None], [[1, 2]], False)
    assert out == [[1, 2, 0]]  # control: without the word both drafts are accepted


def test_sampled_verification_never_commits_a_banned_draft():
    """Rejection sampling: the target row gives the banned token p = 0, so the draft is never accepted, and the
    residual draws from what is left (the word's last token never committed, 200 seeds)."""
    p = SamplingParams(temperature=1.0, bad_words=["ab"], bad_words_token_ids=[[1, 2]])
    logits = torch.tensor([[0.0, 9, 0, 0, 0, 0, 0, 0], [0.0, 0, 4, 0, 0, 0, 0, 0], [0.0] * V])
    for seed in range(200):
        g = torch.Generator().manual_seed(seed)
        (out,), _, _ = verify(logits.clone(), [p] * 3, [([], []), ([], [1]), ([], [1, 2])], [g], [[1, 2]], False)
        assert not (out[0] == 1 and len(out) > 1 and out[1] == 2), out


@pytest.mark.parametrize("value", ["ab", [1], ["ab", ""], ["  "], {"ab": 1}])
def test_anything_but_a_list_of_words_is_refused_by_name(value):
    with pytest.raises(InvalidSamplingParams) as e:
        SamplingParams(bad_words=value)
    assert e.value.field == "bad_words" and "must be a list of words" in e.value.why
