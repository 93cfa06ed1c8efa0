"""first_max: each row's first maximum, the same index as torch's logits.max(-1).indices, for the
shapes the sampler sees and the rows that test its rules: ties near and far apart, a maximum in the
last column, NaNs (torch's max takes the first NaN), +-inf, signed zeros, constant rows."""

from __future__ import annotations

import pytest
import torch

from hearth.sample.sampler import first_max

C = 1024  # a distance past a vector loop's blocks


SHAPES = [(1, 49152), (16, 49152), (3, 151936), (5, 50000), (2, 3000), (4, 2 * C + 1), (1, 1), (7, 33)]


@pytest.mark.parametrize("rows,vocab", SHAPES)
def test_random_rows_match_torch(rows, vocab):
    g = torch.Generator().manual_seed(rows * vocab)
    x = torch.randn(rows, vocab, generator=g)
    assert torch.equal(first_max(x), x.max(-1).indices)


def test_ties_nans_infs_and_the_tail():
    V = 5 * C + 100
    x = torch.randn(12, V, generator=torch.Generator().manual_seed(0))
    x[0, [100, 4000]] = 50.0  # a tie across chunks: the first
    x[1] = float("-inf")  # nothing but -inf: index 0
    x[2, [3000, 4500]] = float("nan")  # NaNs beat any value, the first NaN wins
    x[2, 10] = 99.0
    x[3, V - 1] = 77.0  # the last column, in the tail chunk
    x[4] = 1.0  # constant
    x[5, [2 * C - 1, 2 * C]] = 60.0  # a tie on a chunk boundary
    x[6, [C - 1, C]] = float("inf")
    x[7, V - 1] = float("nan")
    x[8, [5 * C + 3, 5 * C + 7]] = 40.0  # a tie inside the tail
    x[9, [C + 5, C + 6]] = 40.0  # a tie inside a chunk
    x[10] = -x[10].abs()
    x[10, [7, 9]] = torch.tensor([-0.0, 0.0])  # -0.0 == 0.0: the first
    x[11] = float("nan")
    want = x.max(-1).indices
    assert want.tolist()[:4] == [100, 0, 3000, V - 1]  # torch's rules, as described above
    assert torch.equal(first_max(x), want)


def test_strided_rows_take_torch_max():
    x = torch.randn(4, 70000)[:, ::2]
    assert torch.equal(first_max(x), x.max(-1).indices)


def test_tied_rounded_rows_match_torch():
    x = torch.randn(16, 49152, generator=torch.Generator().manual_seed(3)).round(decimals=1)  # many ties
    assert torch.equal(first_max(x), x.max(-1).indices)
