"""The suffix cache (method "suffix"): its trie against brute-force substring counts, its drafts
against a brute-force best-first search, exact eviction within the bound, incremental == rebuilt,
repeats drafted from the first decode step, and its config errors."""

from __future__ import annotations

import heapq
import random
from collections import Counter

import pytest

from hearth.engine.request import Request
from hearth.sampling_params import SamplingParams
from hearth.spec_decode.config import InvalidSpeculativeConfig, SpeculativeConfig
from hearth.spec_decode.policy import SpeculativeDecoder
from hearth.spec_decode.suffix import SuffixProposer, best_draft
from hearth.spec_decode.suffix_trie import SuffixTrie


def brute_counts(seqs, depth):
    c = Counter()
    for s in seqs:
        for i in range(len(s)):
            for j in range(i + 1, min(i + depth, len(s)) + 1):
                c[tuple(s[i:j])] += 1
    return dict(c)


def ref_draft(sources, context, k, depth, factor, min_prob):
    """Brute force over sources [(substring counts, holds context)]: every match length, every
    continuation, the best by (sum of scores, match length, earlier source)."""
    best, key = None, (0.0, 0, 0)
    for rank, (counts, holds_self) in enumerate(sources):
        kids: dict[tuple, list[int]] = {}
        for s in counts:
            kids.setdefault(s[:-1], []).append(s[-1])
        for m in range(1, min(depth - 1, len(context)) + 1):
            u = tuple(context[-m:])
            if u not in counts:
                break
            den = counts[u] - holds_self
            budget = min(k, int(m * factor + 1e-6), depth - m)
            if den <= 0 or budget <= 0:
                continue
            heap, out = [], []

            def push(w, d, p, parent, path):
                for v in kids.get(w, []):
                    q = p * counts[w + (v,)] / d
                    if q >= min_prob:
                        heapq.heappush(heap, (-q, path + (v,), parent))

            push(u, den, 1.0, -1, ())
            while heap and len(out) < budget:
                negq, path, parent = heapq.heappop(heap)
                out.append((path[-1], parent, -negq))
                if m + len(path) < depth:
                    push(u + path, counts[u + path], -negq, len(out) - 1, path)
            if out and (sum(x[2] for x in out), m, -rank) > key:
                best, key = out, (sum(x[2] for x in out), m, -rank)
    return best


def random_text(rng, n, vocab):
    """Tokens with repeats in them (copied spans), as code and chat have."""
    out = []
    while len(out) < n:
        if out and rng.random() < 0.4:
            i = rng.randrange(len(out))
            out += out[i:i + rng.randint(1, 8)]
        else:
            out.append(rng.randrange(vocab))
    return out[:n]


@pytest.mark.parametrize("seed", range(40))
def test_trie_counts_equal_brute_force_while_sequences_grow_and_leave(seed):
    rng = random.Random(seed)
    depth, vocab = rng.randint(1, 7), rng.randint(1, 5)
    trie, seqs = SuffixTrie(depth), {}
    next_id = 0
    for _ in range(60):
        op = rng.random()
        if op < 0.15 or not seqs:
            seqs[next_id] = []
            next_id += 1
        elif op < 0.25 and len(seqs) > 1:  # a sequence leaves while the others keep growing
            sid = rng.choice(list(seqs))
            if sid in trie.seqs:
                trie.remove(sid)
            del seqs[sid]
        else:
            sid = rng.choice(list(seqs))
            new = random_text(rng, rng.randint(0, 5), vocab)
            seqs[sid] += new
            trie.extend(sid, new)
        want = brute_counts(seqs.values(), depth)
        assert trie.substring_counts() == want
    for pattern in {s for s in want} | {(v,) * depth for v in range(vocab + 1)}:
        state = trie.locate(list(pattern))
        assert (state is None) == (pattern not in want)
        if state is not None:
            assert trie.count(state) == want[pattern]
    for sid in list(trie.seqs):
        trie.remove(sid)
    assert trie.is_empty() and trie.num_nodes() == 0


@pytest.mark.parametrize("seed", range(40))
def test_drafts_equal_a_brute_force_best_first_search(seed):
    rng = random.Random(100 + seed)
    depth, vocab = rng.randint(2, 9), rng.randint(2, 6)
    factor, min_prob = rng.choice([0.5, 1.0, 2.0]), rng.choice([0.0, 0.1, 0.3])
    history = [random_text(rng, rng.randint(1, 40), vocab) for _ in range(rng.randint(0, 4))]
    own = random_text(rng, rng.randint(1, 40), vocab)
    glob, mine = SuffixTrie(depth), SuffixTrie(depth)
    for sid, s in enumerate(history):
        glob.extend(sid, s)
        glob.close(sid)
    for step in range(0, len(own), 3):  # the request's own trie grows a few tokens a step
        mine.extend(0, own[step:step + 3])
        ctx = own[max(0, step + 3 - depth):step + 3]
        k = rng.randint(1, 8)
        got = best_draft([(mine, True), (glob, False)], ctx, k, depth, factor, min_prob)
        want = ref_draft([(brute_counts([own[:step + 3]], depth), True), (brute_counts(history, depth), False)],
                         ctx, k, depth, factor, min_prob)
        if want is None:
            assert got is None
        else:
            assert got is not None
            assert list(zip(got.tree.tokens, got.tree.parents, got.tree.scores)) == want


def request(rid, prompt, output=()):
    req = Request(rid, list(prompt), SamplingParams(), frozenset(), 100_000)
    req.output_token_ids = list(output)
    return req


def config(**kw):
    return SpeculativeConfig.parse({"method": "suffix", **kw})


def test_a_repeated_request_drafts_the_earlier_output_from_its_first_decode_step():
    rng = random.Random(0)
    prompt, output = [rng.randrange(1000) for _ in range(300)], [rng.randrange(1000) for _ in range(100)]
    prop = SuffixProposer(config(suffix_decoding_max_tree_depth=32))
    first = request("a", prompt, output[:1])
    assert prop.propose([first], [16]) == {}  # nothing seen before: no draft, no verify rows
    first.output_token_ids = list(output)
    prop.forget("a")
    again = request("b", prompt, output[:1])  # the first decode step of the same prompt
    tree = prop.propose([again], [16])["b"]
    assert tree.chain() == output[1:17] and tree.scores == [1.0] * 16
    assert prop.propose([request("c", [5000, 5001], [5002])], [16]) == {}


def test_eviction_keeps_the_bound_and_removes_counts_exactly():
    rng = random.Random(1)
    prop = SuffixProposer(config(suffix_decoding_max_cached_requests=3, suffix_decoding_max_tree_depth=6))
    texts = [random_text(rng, 50, 7) for _ in range(6)]
    for i, t in enumerate(texts):
        req = request(str(i), t[:30], t[30:31])
        if i % 2:
            prop.propose([req], [4])
        else:
            prop.track([req])  # decoded without drafts: cached all the same
        req.output_token_ids = t[30:]  # it decodes on; the cache takes its final text
        prop.forget(str(i))
        assert len(prop.global_trie) == min(i + 1, 3)
        assert prop.global_trie.substring_counts() == brute_counts(texts[max(0, i - 2):i + 1], 6)
    while prop.cached:
        prop.global_trie.remove(prop.cached.popleft())
    assert prop.global_trie.is_empty() and not prop.live and not prop.seen


def test_incremental_equals_rebuilt_each_step():
    rng = random.Random(2)
    text = random_text(rng, 400, 9)
    cfg = config(suffix_decoding_max_tree_depth=10, suffix_decoding_max_cached_requests=0)
    inc, req, n = SuffixProposer(cfg), request("r", text[:50]), 50
    while n < len(text):
        n = min(len(text), n + rng.randint(1, 6))
        req.output_token_ids = text[50:n]
        fresh = SuffixProposer(cfg)  # builds its trie from the whole request at once
        assert inc.propose([req], [6]) == fresh.propose([req], [6])
        assert inc.live["r"].trie.substring_counts() == fresh.live["r"].trie.substring_counts()
    assert inc.live["r"].trie.substring_counts() == brute_counts([text], 10)


def test_memory_grows_with_repeated_text_not_length_times_depth():
    rng = random.Random(3)
    text = [rng.randrange(50_000) for _ in range(4000)]
    trie = SuffixTrie(24)
    trie.extend(0, text)
    assert trie.num_nodes() < 1.1 * len(text)  # a spelled-out trie would hold ~24 x 4000
    trie.extend(1, text)  # the same text again: every string of it now counts 2
    assert trie.substring_counts()[tuple(text[100:124])] == 2


def test_requests_decoding_in_a_step_too_big_to_draft_are_still_cached():
    spec = SpeculativeDecoder(config(disable_by_batch_size=2))
    reqs = [request(str(i), [i, 7, 8, 9], [10 + i]) for i in range(2)]
    assert spec.propose(reqs, num_running=2) == {}
    for r in reqs:
        spec.forget(r.request_id)
    assert len(spec.proposer.global_trie) == 2
    assert spec.proposer.global_trie.count(spec.proposer.global_trie.locate([7, 8, 9])) == 2


def test_suffix_config_defaults_and_errors():
    c = config()
    assert (c.num_speculative_tokens, c.k, c.suffix_decoding_max_tree_depth) == (None, 64, 64)  # unset: the default
    assert config(num_speculative_tokens=5).k == 5
    assert SpeculativeConfig.parse({"method": "ngram"}).k == 4
    assert config(suffix_decoding_min_token_prob=0).suffix_decoding_min_token_prob == 0
    for bad, field in [({"suffix_decoding_max_tree_depth": 1}, "suffix_decoding_max_tree_depth"),
                       ({"suffix_decoding_max_cached_requests": -1}, "suffix_decoding_max_cached_requests"),
                       ({"suffix_decoding_max_spec_factor": 0}, "suffix_decoding_max_spec_factor"),
                       ({"suffix_decoding_min_token_prob": 1.5}, "suffix_decoding_min_token_prob"),
                       ({"suffix_decoding_min_token_prob": "0.1"}, "suffix_decoding_min_token_prob"),
                       ({"suffix_decoding_max_tree_depth": 2.5}, "suffix_decoding_max_tree_depth"),
                       ({"num_speculative_tokens": 0}, "num_speculative_tokens")]:
        with pytest.raises(InvalidSpeculativeConfig) as e:
            config(**bad)
        assert field in str(e.value) and "\n" not in str(e.value)


def test_greedy_with_suffix_drafts_equals_plain_greedy_and_a_repeat_is_drafted(smol_llm, model_path):
    """On the real SmolLM2: the first request drafts from its own text, the same request sent
    again drafts its earlier output from the cache; both are token for token plain greedy."""
    from hearth import LLM

    from tests.spec_decode.test_real_model import generate

    spec_llm = LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=2048,
                   speculative_config={"method": "suffix", "cost_aware": False})
    p = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    prompt = {"prompt_token_ids": smol_llm.encode_chat([{"role": "user", "content": "Write a short story about a cat."}])}
    want, _, _ = generate(smol_llm, prompt, p)
    first, _, _ = generate(spec_llm, prompt, p)
    again, drafted, accepted = generate(spec_llm, prompt, p)
    assert first.token_ids == want.token_ids and first.text == want.text
    assert again.token_ids == want.token_ids and again.text == want.text
    assert accepted >= 0.95 * drafted and accepted >= 0.75 * len(want.token_ids), (drafted, accepted)
