"""The Gated DeltaNet's recurrence (qwen35's linear-attention layers) in plain torch: a causal depthwise conv
continued from a per-sequence window, and the gated delta rule token by token from a per-sequence state.

Same math as transformers' causal_conv1d_update / torch_recurrent_gated_delta_rule (Qwen3_5GatedDeltaNet) and
llama.cpp's ggml_ssm_conv + gated delta net (src/models/delta-net-base.cpp), for a flat batch of sequences
that each continue from their slot's state. The slow, obvious twin of any faster form."""

from __future__ import annotations

from collections.abc import Callable, Container

import torch
import torch.nn.functional as F

KeepRows = Callable[[list[int], torch.Tensor, torch.Tensor, torch.Tensor], None]
"""keep(rows, factor [S, H], k [S, H, dk], delta [S, H, dv]): what one token step folded into the states of the
step's flat rows `rows` (hearth.kvstore.recurrent_log replays it to roll a verify step's state back)."""


def causal_conv(x: torch.Tensor, window: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """One sequence's new conv inputs x: [n, C] f32 after the kernel - 1 before them, window: [C, K - 1] (updated
    in place to the last K - 1 inputs), weight: [C, K] (tap K - 1 is the row's own) -> silu(conv) [n, C]."""
    n, c = x.shape
    full = torch.cat([window, x.t()], dim=1)  # [C, K - 1 + n]
    window.copy_(full[:, full.shape[1] - window.shape[1]:])
    return F.silu(F.conv1d(full[None], weight[:, None], groups=c)[0].t())  # [n, C]


def causal_conv_rows(x: torch.Tensor, windows: torch.Tensor, slots: list[int], weight: torch.Tensor) -> torch.Tensor:
    """One new input per sequence (a decode batch): x [S, C], sequence i's window windows[slots[i]] [C, K - 1]
    (updated in place) -> silu(conv) [S, C], the S windows gathered and written back once."""
    index = torch.tensor(slots, dtype=torch.long, device=windows.device)
    full = torch.cat([windows.index_select(0, index), x[..., None]], dim=-1)  # [S, C, K]
    windows.index_copy_(0, index, full[..., 1:])
    return F.silu((full * weight).sum(-1))


def causal_conv_batch(x: torch.Tensor, windows: torch.Tensor, qsl: list[int], slots: list[int],
                      weight: torch.Tensor, token_steps: Container[int] = ()) -> torch.Tensor:
    """A flat batch: sequence i's rows qsl[i]:qsl[i + 1] continue windows[slots[i]] (updated in place) -> silu(conv)
    [T, C]. A sequence of fewer than LONG rows, or named in token_steps, runs token by token with the others'
    (causal_conv_rows: a decode row's ops, so a verify row's bits are a decode row's); a longer one in one conv."""
    out = x.new_empty(x.shape)
    lens = [b - a for a, b in zip(qsl, qsl[1:])]
    short = [i for i, n in enumerate(lens) if n < LONG or i in token_steps]
    for i in (i for i in range(len(lens)) if i not in short):
        out[qsl[i]:qsl[i + 1]] = causal_conv(x[qsl[i]:qsl[i + 1]], windows[slots[i]], weight)
    for t in range(max((lens[i] for i in short), default=0)):
        live = [i for i in short if lens[i] > t]
        rows = [qsl[i] + t for i in live]
        out[rows] = causal_conv_rows(x[rows], windows, [slots[i] for i in live], weight)
    return out


LANES = 64
"""Floats a row of a [rows, heads] transcendental op is padded to (row_safe). torch's CPU kernels run a contiguous
tensor's elements through Sleef's vector functions in blocks of two vectors and the last few through the scalar
libm ones, which differ in the last bit (softplus, sigmoid: measured on 3,489 and 1,950 of 4,096 rows of 16 heads):
so a row's bits would hang on how many rows share its step. Padded to whole blocks (2 x 16 floats on AVX-512,
less elsewhere) every row takes the vector path."""


def row_safe(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """fn(x) for an elementwise fn over x [rows, heads], each row's bits whatever the other rows (LANES)."""
    h = x.shape[-1]
    return fn(x) if h % LANES == 0 else fn(F.pad(x, (0, -h % LANES)))[..., :h]


def l2_normed(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / |x| over the last dim (transformers' l2norm: rsqrt(sum x^2 + eps))."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


FLOOR = -80.0
"""Decay exponents below this give exactly 0: e^-80 and smaller only make denormals, whose arithmetic is many
times slower (as the C++ attention drops softmax weights below e^-80). State values below ~2^-124 are dropped
alike (_flushed_)."""
SHIFT = 2.0 ** -100
"""(x + SHIFT) - SHIFT is x to within ~1e-30 (x itself from ~1e-23 up), and 0 or at least 2^-124 in size,
never a denormal (below 2^-126): near SHIFT the floats are 2^-124 apart. Two in-place passes, where a
|x| < tiny mask took three and two temporaries."""


def _decayed(x: torch.Tensor) -> torch.Tensor:
    """e^x, 0 where x < FLOOR."""
    return x.masked_fill(x < FLOOR, float("-inf")).exp()


def _flushed_(state: torch.Tensor) -> torch.Tensor:
    """state with its values below ~2^-124 zeroed, in place: a head that decays fast would otherwise leave
    denormals wherever no key refreshes it."""
    return state.add_(SHIFT).sub_(SHIFT)


def delta_step_(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, decay: torch.Tensor, beta: torch.Tensor,
                state: torch.Tensor, kept: Callable[[torch.Tensor, torch.Tensor], None] | None = None) -> torch.Tensor:
    """One token of S sequences: q, k [S, H, dk] (q scaled, both normed), v [S, H, dv], decay (log, <= 0) and
    beta [S, H], state [S, H, dk, dv] (updated in place) -> out [S, H, dv]. Four passes over the state: the
    decay, one matmul for k's and q's reads (q's output is q.S' + (q.k) delta, S' the decayed state), the
    write, the flush. kept(factor [S, H], delta [S, H, dv]): told what the state took (replay_ redoes it)."""
    factor = row_safe(_decayed, decay)  # [S, H]
    state.mul_(factor[..., None, None])
    read = torch.stack([k, q], dim=-2) @ state  # [S, H, 2, dv]: what the state recalls for k, and for q
    delta = (v - read[..., 0, :]) * beta[..., None]
    _written_(state, k, delta)
    if kept is not None:
        kept(factor, delta)
    return read[..., 1, :] + (q * k).sum(-1, keepdim=True) * delta


def _written_(state: torch.Tensor, k: torch.Tensor, delta: torch.Tensor) -> None:
    state.addcmul_(k[..., :, None], delta[..., None, :])
    _flushed_(state)


def replay_(state: torch.Tensor, factor: torch.Tensor, k: torch.Tensor, delta: torch.Tensor) -> None:
    """delta_step_'s state update again from what it kept: state [..., H, dk, dv] in place, factor [..., H],
    k [..., H, dk], delta [..., H, dv]. The same elementwise ops on the same values: the same bits."""
    state.mul_(factor[..., None, None])
    _written_(state, k, delta)


CHUNK = 64
"""Rows of one sequence the chunked form takes at once (transformers' and fla's chunk size)."""


def delta_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, decay: torch.Tensor, beta: torch.Tensor,
                  state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's rows, CHUNK at a time, with delta_step_'s result up to f32 rounding: q, k [n, H, dk],
    v [n, H, dv], decay, beta [n, H], state [H, dk, dv] -> (out [n, H, dv], the new state).

    Within a chunk, with G the running sum of decay and u_t the value row t writes (beta_t (v_t - what the state
    recalls for k_t)): S_t = e^G_t S_0 + sum_{i<=t} e^(G_t - G_i) k_i u_i^T, so (I + A) U = beta (V - e^G K S_0)
    with A[t, i] = beta_t e^(G_t - G_i) k_t.k_i below the diagonal (a unit lower-triangular solve), then
    O = e^G Q S_0 + (e^(G_t - G_i) q_t.k_i, i <= t) U and S_C = e^G_C S_0 + K^T e^(G_C - G) U."""
    out = v.new_empty(v.shape)
    for a in range(0, q.shape[0], CHUNK):
        b = min(a + CHUNK, q.shape[0])
        qc, kc, vc = (t[a:b].transpose(0, 1) for t in (q, k, v))  # [H, C, d]
        g = decay[a:b].t().cumsum(-1)  # [H, C]
        bc = beta[a:b].t()[..., None]  # [H, C, 1]
        n = b - a
        lower = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        gaps = _decayed((g[:, :, None] - g[:, None, :]).masked_fill(~lower, float("-inf")))  # [H, C, C]
        a_mat = (bc * gaps * (kc @ kc.transpose(1, 2))).tril(-1)
        since = _decayed(g)[..., None]  # [H, C, 1]: e^G_t, the start state's share at row t
        rhs = bc * (vc - since * (kc @ state))  # [H, C, dv]
        eye = torch.eye(n, dtype=q.dtype, device=q.device)
        u = torch.linalg.solve_triangular(eye + a_mat, rhs, upper=False, unitriangular=True)
        o = since * (qc @ state) + (gaps * (qc @ kc.transpose(1, 2))) @ u
        out[a:b] = o.transpose(0, 1)
        last = g[:, -1:]  # [H, 1]
        state = _flushed_(_decayed(last)[..., None] * state + kc.transpose(1, 2) @ (_decayed(last - g)[..., None] * u))
    return out, state


LONG = 16
"""From this many rows a sequence's step takes the chunked form (fewer: token by token, with the others)."""


def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, decay: torch.Tensor, beta: torch.Tensor,
                     states: torch.Tensor, qsl: list[int], slots: list[int], token_steps: Container[int] = (),
                     keep: KeepRows | None = None) -> torch.Tensor:
    """A flat batch: sequence i's rows qsl[i]:qsl[i + 1] continue from states[slots[i]] (updated in place).
    q, k: [T, H, dk], v: [T, H, dv], decay, beta: [T, H], states: [slots, H, dk, dv] -> [T, H, dv].
    A sequence of LONG rows or more runs chunked (delta_chunked) unless named in token_steps (a verify step's:
    its rows as decode rows); the others in steps, step t running the t-th row of every one that has one: a
    decode batch is one step. keep: told what each step folded into its rows' states (KeepRows)."""
    out = v.new_empty(v.shape)
    lens = [b - a for a, b in zip(qsl, qsl[1:])]
    short = [i for i, n in enumerate(lens) if n < LONG or i in token_steps]
    for i, n in enumerate(lens):  # long prompt chunks: in matmuls
        if i not in short:
            rows = slice(qsl[i], qsl[i + 1])
            out[rows], states[slots[i]] = delta_chunked(q[rows], k[rows], v[rows], decay[rows], beta[rows],
                                                        states[slots[i]])
    if short:
        _stepwise(q, k, v, decay, beta, states, out, [qsl[i] for i in short], [lens[i] for i in short],
                  [slots[i] for i in short], keep)
    return out


def _stepwise(q, k, v, decay, beta, states: torch.Tensor, out: torch.Tensor, starts: list[int], lens: list[int],
              slots: list[int], keep: KeepRows | None = None) -> None:
    """gated_delta_rule for the sequences whose rows start at `starts`, token by token: step t takes the t-th
    row of each that has one (into out), on their states in place: a view where the slots run in order (a
    decode batch, mostly), else gathered once and scattered back."""
    in_order = slots == list(range(slots[0], slots[0] + len(slots)))
    index = torch.tensor(slots, dtype=torch.long, device=states.device)
    s = states[slots[0]:slots[0] + len(slots)] if in_order else states.index_select(0, index)  # [S, H, dk, dv]
    for t in range(max(lens)):
        live = [i for i, n in enumerate(lens) if n > t]
        flat = [starts[i] + t for i in live]
        rows = torch.tensor(flat, dtype=torch.long, device=q.device)
        kt = k[rows]
        kept = None if keep is None else (lambda factor, delta: keep(flat, factor, kt, delta))  # noqa: E731
        if len(live) == len(lens):
            out[rows] = delta_step_(q[rows], kt, v[rows], decay[rows], beta[rows], s, kept)
        else:
            at = torch.tensor(live, dtype=torch.long, device=s.device)
            part = s.index_select(0, at)
            out[rows] = delta_step_(q[rows], kt, v[rows], decay[rows], beta[rows], part, kept)
            s.index_copy_(0, at, part)
    if not in_order:
        states.index_copy_(0, index, s)
