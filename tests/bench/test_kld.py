"""hearth.bench.kld: the lumped KL straight from logits (what the fidelity test and the goldens use) is
lumped_kl of the full log_softmax, bit for bit; a distribution against itself is 0."""

from __future__ import annotations

import numpy as np

from hearth.bench.kld import log_softmax, lumped_kl, lumped_kl_of_logits


def test_lumped_kl_of_logits_is_lumped_kl_of_the_log_softmax():
    rng = np.random.default_rng(0)
    ref = rng.normal(0, 4, (16, 5000)).astype(np.float32)  # [N, V] reference logits
    ours = ref + rng.normal(0, 0.3, ref.shape).astype(np.float32)  # an engine near the reference
    top = log_softmax(ref)
    ids = np.argsort(-top, axis=-1)[:, :32]  # [N, K] the reference's top 32
    ref_lp = np.take_along_axis(top, ids, axis=-1)
    full = lumped_kl(ids, ref_lp, log_softmax(ours))
    assert (full > 1e-4).all()
    assert np.array_equal(lumped_kl_of_logits(ids, ref_lp, ours), full)
    np.testing.assert_allclose(lumped_kl_of_logits(ids, ref_lp, ref), 0, atol=1e-12)
