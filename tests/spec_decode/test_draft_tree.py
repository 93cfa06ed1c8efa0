"""DDTree from the draft model: a best-first tree from the drafted chain's per-position top-k,
verified in one target forward. SmolLM2 drafting for itself: greedy stays plain greedy token for
token with trees sent; sampled requests (the chain drawn from q and accepted by min(1, p/q), the
branches the top-k, point masses under SpecInfer's rule) stay reproducible with a seed, and a draft
unlike the target has side branches accepted."""

from __future__ import annotations

import pytest

from hearth import LLM, SamplingParams
from hearth.runner.draft_tree import best_first_tree
from tests.spec_decode.test_real_model import CODE, GREEDY, STORY, chat, generate, plain_greedy


def test_best_first_tree_is_seeded_with_the_chain_and_grows_by_path_probability():
    chain, probs = [5, 6, 7], [0.9, 0.8, 0.5]
    top = [[(5, 0.9), (1, 0.05)], [(6, 0.8), (2, 0.15)], [(7, 0.5), (3, 0.4)]]
    tokens, parents, scores = best_first_tree(chain, probs, top, 6)
    # 3 after node 1 (.9 * .8 * .4 = .288), 2 after node 0 (.9 * .15), 7 after that 2 (.135 * .5) > 1 at the root (.05)
    assert (tokens, parents) == ([5, 6, 7, 3, 2, 7], [-1, 0, 1, 1, 0, 4])
    assert scores == pytest.approx([0.9, 0.72, 0.36, 0.288, 0.135, 0.0675])
    assert best_first_tree(chain, probs, top, 2)[:2] == ([5, 6], [-1, 0])  # the chain first, cut to the budget
    # a sampled chain token outside the top-k keeps its place; the top-k's own first child joins as a sibling
    tokens, parents, _ = best_first_tree([1], [0.05], [[(5, 0.9), (1, 0.05)]], 3)
    assert (tokens, parents) == ([1, 5], [-1, -1])


@pytest.fixture(scope="module")
def tree_draft(model_path):
    smol = str(model_path("smollm2-135m"))
    spec = {"method": "draft", "model": smol, "num_speculative_tokens": 4, "tree_budget": 8, "cost_aware": False}
    llm = LLM(smol, progress=False, max_model_len=2048, speculative_config=spec)
    sent = llm.sent_trees = []
    run = llm.runner._run
    llm.runner._run = lambda so: sent.extend(s.spec_parents for s in so.seqs if s.is_tree) or run(so)
    return llm


def test_greedy_with_draft_trees_equals_plain_greedy(smol_llm, tree_draft):
    for prompt in (CODE, chat(smol_llm, STORY)):
        want = plain_greedy(smol_llm, prompt, GREEDY)
        got, drafted, accepted = generate(tree_draft, prompt, GREEDY)
        assert got.token_ids == want.token_ids and got.text == want.text
        assert drafted >= 100 and accepted >= 60, (drafted, accepted)
    assert tree_draft.sent_trees and max(len(p) for p in tree_draft.sent_trees) > 4  # branches past the chain


def test_sampled_draft_trees_accept_the_chain_by_q_and_are_reproducible(smol_llm, tree_draft):
    """The draft is the target: q = p, so its chain child is always accepted (min(1, p/q) = 1)."""
    prompt = chat(smol_llm, "Write a short story about a cat.")
    p = SamplingParams(temperature=1.0, seed=5, max_tokens=48, ignore_eos=True)
    a, drafted, accepted = generate(tree_draft, prompt, p)
    b, _, _ = generate(tree_draft, prompt, p)
    assert a.token_ids == b.token_ids
    # per step the chain's 4 nodes (all accepted but the odd end of the request) and up to 4 branches
    assert drafted > 0 and accepted >= 0.45 * drafted, (drafted, accepted)


def test_a_draft_unlike_the_target_takes_side_branches(smol_llm, tree_draft):
    """A worse draft (its logits halved: a flatter q than p): chain children get rejected and the
    top-k branches are accepted in their place, reproducibly with a seed."""
    prompt = chat(smol_llm, "Write a short story about a cat.")
    p = SamplingParams(temperature=1.0, seed=7, max_tokens=48, ignore_eos=True)
    drafter = tree_draft.runner.drafter
    forward = drafter._forward
    drafter._forward = lambda batch, rows, rids=(): forward(batch, rows, rids) * 0.5
    s = tree_draft.engine.spec.stats
    before = s.num_accepted_off_chain
    try:
        a, drafted, accepted = generate(tree_draft, prompt, p)
        b, _, _ = generate(tree_draft, prompt, p)
    finally:
        del drafter._forward
    assert a.token_ids == b.token_ids
    assert drafted > 0 and accepted > 0 and s.num_accepted_off_chain > before, (drafted, accepted)
