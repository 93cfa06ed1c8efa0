"""hearth.layers.delta_rule: the chunked form of the gated delta rule against the token-by-token one (the obvious
twin), and a flat batch of sequences with their own slots against each alone."""

import torch

from hearth.layers.delta_rule import CHUNK, LONG, delta_chunked, delta_step_, gated_delta_rule, l2_normed

TOL = 1e-5  # f32 rounding of the two orders of summation (measured 2e-6 at 150 rows)


def _inputs(n: int, heads: int = 4, dk: int = 16, dv: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = l2_normed(torch.randn(n, heads, dk, generator=g), 1e-6) * dk ** -0.5
    k = l2_normed(torch.randn(n, heads, dk, generator=g), 1e-6)
    v = torch.randn(n, heads, dv, generator=g)
    decay = -torch.nn.functional.softplus(torch.randn(n, heads, generator=g)) * 4 * torch.rand(heads, generator=g)
    beta = torch.rand(n, heads, generator=g)
    return q, k, v, decay, beta


def _token_by_token(q, k, v, decay, beta, state):
    s, outs = state[None].clone(), []
    for t in range(q.shape[0]):
        outs.append(delta_step_(q[t:t + 1], k[t:t + 1], v[t:t + 1], decay[t:t + 1], beta[t:t + 1], s))
    return torch.cat(outs), s[0]


def _rel(a, b) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def test_the_chunked_form_equals_token_by_token_across_chunks():
    for n in (1, 5, CHUNK, 2 * CHUNK + 22):
        q, k, v, decay, beta = _inputs(n, seed=n)
        start = 0.3 * torch.randn(4, 16, 8, generator=torch.Generator().manual_seed(1))
        got, got_state = delta_chunked(q, k, v, decay, beta, start)
        want, want_state = _token_by_token(q, k, v, decay, beta, start)
        assert _rel(got, want) < TOL and _rel(got_state, want_state) < TOL, n


def test_a_flat_batch_continues_each_sequences_own_slot():
    """Three sequences (a long chunk, a short one, a decode row) in one call, slots out of order == each alone;
    the slots not named are untouched."""
    lens, slots = [LONG + 9, 5, 1], [3, 0, 2]
    q, k, v, decay, beta = _inputs(sum(lens), seed=4)
    states = torch.randn(4, 4, 16, 8, generator=torch.Generator().manual_seed(2))
    before = states.clone()
    qsl = [0, lens[0], lens[0] + lens[1], sum(lens)]
    out = gated_delta_rule(q, k, v, decay, beta, states, qsl, slots)
    for i, slot in enumerate(slots):
        rows = slice(qsl[i], qsl[i + 1])
        want, want_state = _token_by_token(q[rows], k[rows], v[rows], decay[rows], beta[rows], before[slot])
        assert _rel(out[rows], want) < TOL and _rel(states[slot], want_state) < TOL
    assert torch.equal(states[1], before[1])


def test_a_decode_batchs_conv_equals_each_sequences_own():
    from hearth.layers.delta_rule import causal_conv, causal_conv_rows

    g = torch.Generator().manual_seed(5)
    x, weight = torch.randn(3, 12, generator=g), torch.randn(12, 4, generator=g)
    windows = torch.randn(5, 12, 3, generator=g)
    want_windows = windows.clone()
    want = torch.cat([causal_conv(x[i:i + 1], want_windows[s], weight) for i, s in enumerate([4, 0, 2])])
    got = causal_conv_rows(x, windows, [4, 0, 2], weight)
    assert _rel(got, want) < TOL and torch.equal(windows, want_windows)


def test_a_decode_batch_in_slot_order_updates_the_slots_in_place():
    """Slots 1, 2 in order: stepped on a view of the states (no gather), each equal to its sequence alone."""
    q, k, v, decay, beta = _inputs(2, seed=6)
    states = torch.randn(4, 4, 16, 8, generator=torch.Generator().manual_seed(3))
    before = states.clone()
    out = gated_delta_rule(q, k, v, decay, beta, states, [0, 1, 2], [1, 2])
    for i, slot in enumerate([1, 2]):
        want, want_state = _token_by_token(q[i:i + 1], k[i:i + 1], v[i:i + 1], decay[i:i + 1], beta[i:i + 1],
                                           before[slot])
        assert _rel(out[i:i + 1], want) < TOL and _rel(states[slot], want_state) < TOL
    assert torch.equal(states[0], before[0]) and torch.equal(states[3], before[3])


def test_a_decayed_state_holds_no_denormals():
    """A state fading in a fast-decaying head: its values end 0 or normal, never denormal (slow arithmetic)."""
    q, k, v, decay, beta = _inputs(1, seed=7)
    state = torch.full((1, 4, 16, 8), 1e-36)
    state[..., 0, 0] = 1.0
    delta_step_(q, k, v, torch.full_like(decay, -10.0), beta * 0, state)  # no write: only the decay, to 4.5e-41
    tiny = (state != 0) & (state.abs() < torch.finfo(torch.float32).tiny)
    assert not tiny.any() and (state[..., 0, 0] > 4e-5).all()


def test_row_safe_gives_a_row_the_same_bits_whatever_the_rows_beside_it():
    """softplus / sigmoid over [rows, 16 heads] (Qwen3.5's value heads): a row alone equals it among many (a decode
    row and the same row in a verify step); torch's own kernels take a tail through other functions."""
    import torch.nn.functional as F

    from hearth.layers.delta_rule import row_safe

    x = 3 * torch.randn(301, 16, generator=torch.Generator().manual_seed(8))
    for fn in (F.softplus, torch.sigmoid):
        alone = torch.cat([row_safe(fn, x[i:i + 1]) for i in range(x.shape[0])])
        assert torch.equal(row_safe(fn, x), alone)
        if torch.backends.cpu.get_cpu_capability() == "AVX512":  # where it was measured: the plain op differs
            assert not torch.equal(fn(x), torch.cat([fn(x[i:i + 1]) for i in range(x.shape[0])]))


def test_a_flat_batchs_conv_runs_short_sequences_as_decode_rows():
    """causal_conv_batch: a sequence of a few rows (a verify step's) takes the decode batch's op, row by row, equal
    bit for bit to feeding its rows one decode step at a time; a long one its own conv."""
    from hearth.layers.delta_rule import causal_conv_batch, causal_conv_rows

    g = torch.Generator().manual_seed(9)
    x, weight = torch.randn(LONG + 4 + 3, 12, generator=g), torch.randn(12, 4, generator=g)
    windows = torch.randn(3, 12, 3, generator=g)
    want_windows = windows.clone()
    qsl, slots = [0, LONG + 4, LONG + 7], [2, 0]
    got = causal_conv_batch(x, windows, qsl, slots, weight)
    rows = [causal_conv_rows(x[r:r + 1], want_windows, [0], weight) for r in range(qsl[1], qsl[2])]
    assert torch.equal(got[qsl[1]:], torch.cat(rows)) and torch.equal(windows[0], want_windows[0])
