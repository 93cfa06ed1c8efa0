"""The CUDA backend's quantized KV cache (fp8_e4m3, q8_0, q4_0) in Triton's interpreter on the CPU: the encoders
bit for bit the torch codecs, the write what QuantizedKVCache.write leaves (staging, sealed blocks),
attention over the encoded blocks the torch twin's (paged_attention_quantized_torch)."""

from __future__ import annotations

import pytest
import torch

from hearth.errors import UnsupportedError
from hearth.kernels.attention import AttentionMetadata, paged_attention_quantized_torch
from hearth.kernels.gpu.kv_codecs import encode_blocks
from hearth.kernels.gpu.launch import LaunchError, launch
from hearth.kernels.gpu.quantized_attention import quantized_attention, refusal, write_quantized
from hearth.kvstore.codecs import QUANTIZED, get_codec
from hearth.kvstore.paged import QuantizedKVCache, StagingTable
from tests.gpu.test_triton_kernels import DEV

NAMES = ["fp8_e4m3", "q8_0", "q4_0"]
ATOL = 2e-5  # f32 sums in another order than SDPA's, outputs of order 1: the Triton attention tests' bound (1e-5 here
# was tighter than it says: a Zen 4's numpy, which the interpreter runs on, gave 1.17e-5 at an output of 2.15)


def _on_dev(shape, dtype):
    return torch.zeros(shape, dtype=dtype, device=DEV)


def _fields(store) -> dict:
    return {(p, n): t.cpu().view(torch.uint8) for p, f in store.items() for n, t in f.items()}


@pytest.mark.parametrize("name", NAMES)
def test_encode_is_the_torch_codec_bit_for_bit(name):
    """Blocks with an outlier (fp8: values far below its scale, down to e4m3's subnormals), an all-zero
    head, negative zeros, values exactly on rounding ties (scale 1), two largest |x| of opposite signs:
    the same bytes as the torch codec."""
    g = torch.Generator().manual_seed(4)
    m, bs, kvh, d = 3, 16, 2, 64
    fresh = torch.randn(2, m, bs, kvh, d, generator=g)
    fresh[0, 0, 3, 1, 5] = 900.0  # one outlier: the rest of its block's head maps near 0
    fresh[1, 1, :, 0] = 0.0  # amax 0: scale 1 / d 0
    fresh[1, 2, 0, 1, :8] = -0.0
    ties = torch.tensor([1.0625, 1.1875, -1.0625, 3 * 2 ** -10, 2.5, -3.5, 0.5, -0.5])
    fresh[1, 0, :, 1] = 0.25
    fresh[1, 0, 0, 1, :9] = torch.cat([torch.tensor([448.0]), ties])  # fp8 scale 1: ties to even, subnormal too
    fresh[1, 2, 0, 0, :32] = 0.25
    fresh[1, 2, 0, 0, :9] = torch.cat([torch.tensor([127.0]), ties])  # q8_0 d 1: halves away from zero
    fresh[0, 1, 2, 1, :32] = 0.5
    fresh[0, 1, 2, 1, [4, 20]] = torch.tensor([-2.0, 2.0])  # q4_0: the first largest |x| gives d its sign
    fresh = fresh.half()
    seal = torch.tensor([5, 0, 3])
    codec = get_codec(name)
    ours = {p: {n: _on_dev((8, *s), t) for n, (s, t) in f.items()} for p, f in codec.fields(bs, kvh, d).items()}
    encode_blocks(name, fresh.to(DEV), seal.to(DEV), ours)
    for i, part in enumerate(("k", "v")):
        want = getattr(codec, part).encode(fresh[i].float())
        for field, t in want.items():
            got = ours[part][field].cpu()[seal]
            assert torch.equal(got.view(torch.uint8), t.view(torch.uint8)), f"{part}.{field} differs"
        assert ours[part][next(iter(want))].cpu()[[1, 2, 4, 6, 7]].view(torch.uint8).sum() == 0  # only sealed blocks written


def _step(name, kvh, d, seqs, g, bs=16, dev=DEV):
    """A cache on `dev` written by the Triton write and one on the host by QuantizedKVCache.write, with the
    same random K/V: a prefill of what each sequence holds, then this step's new tokens. -> (ours, theirs, meta)."""
    codec = get_codec(name)
    nbs = [-(-(before + new) // bs) for before, new in seqs]
    num_blocks = sum(nbs) + 3
    perm = torch.randperm(num_blocks, generator=g).tolist()
    tables = [perm[sum(nbs[:i]):sum(nbs[:i + 1])] for i in range(len(seqs))]
    staging = StagingTable(bs, 1, codec.sink)  # one slot: the table grows it, the caches follow
    ours = QuantizedKVCache(codec, num_blocks, bs, kvh, d, 1, lambda s, t: torch.zeros(s, dtype=t, device=dev))
    theirs = QuantizedKVCache(codec, num_blocks, bs, kvh, d, 1)

    def run(parts):  # (request index, start, new tokens)
        qsl = [0]
        for _, _, n in parts:
            qsl.append(qsl[-1] + n)
        meta = AttentionMetadata(qsl, [p + n for _, p, n in parts], [tables[i] for i, _, _ in parts],
                                 torch.zeros(0, dtype=torch.long), bs)
        meta.kv_plan = staging.plan([(f"r{i}", p, n, tables[i]) for i, p, n in parts], qsl)
        kv = torch.randn(qsl[-1], 2, kvh, d, generator=g) * 2
        write_quantized(ours, kv.to(dev), meta)
        theirs.write(kv, meta.kv_plan)
        return meta

    run([(i, 0, before) for i, (before, _) in enumerate(seqs) if before])
    return ours, theirs, run([(i, before, new) for i, (before, new) in enumerate(seqs)])


CASES = [  # heads, kv_heads, head_dim, (cached, new) per sequence, window, softcap
    (4, 2, 32, [(30, 1), (15, 1), (0, 1), (47, 1)], 0, 0.0),  # decodes: partial blocks, one filling its block, a first token
    (4, 2, 32, [(5, 30), (20, 1)], 0, 0.0),  # a chunk sealing a block it began earlier, and one it begins
    (4, 1, 64, [(40, 1), (9, 20), (3, 12)], 7, 0.0),  # sliding window, a group of 4; a short chunk row-wise
    (2, 2, 32, [(33, 2), (0, 17)], 0, 20.0),  # softcap
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"h{c[0]}kv{c[1]}d{c[2]}q{sum(n for _, n in c[3])}w{c[4]}c{c[5]:g}")
def test_write_and_attention_equal_the_torch_twin(name, case, monkeypatch):
    """Chunks of 16 rows or more in the flash tiles, the other rows row-wise (both kernels on the same step)."""
    from hearth.kernels.gpu import quantized_attention as module

    kernels = []
    monkeypatch.setattr(module, "launch", lambda k, *a, **kw: kernels.append(k) or launch(k, *a, **kw))
    heads, kvh, d, seqs, window, softcap = case
    g = torch.Generator().manual_seed(d + len(seqs))
    ours, theirs, meta = _step(name, kvh, d, seqs, g)
    assert _fields(ours.store).keys() == _fields(theirs.store).keys()
    for key, t in _fields(ours.store).items():
        assert torch.equal(t, _fields(theirs.store)[key]), f"sealed blocks' {key} differ"
    assert torch.equal(ours.staging.cpu(), theirs.staging) and ours.staging.device.type == torch.device(DEV).type
    q = torch.randn(meta.query_start_loc[-1], heads, d, generator=g)
    scale = d ** -0.5 * 3  # sharp: a softmax far from uniform
    got = quantized_attention(q.to(DEV), ours, meta, scale, window, softcap).cpu()
    want = paged_attention_quantized_torch(q, theirs, meta, scale, window, softcap)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    flash = sum(n >= module.FLASH_MIN_ROWS for _, n in seqs)
    assert kernels.count(module.quantized_flash_kernel) == flash
    assert (module.quantized_attention_kernel in kernels) == (flash < len(seqs))


def test_attention_reads_the_encoded_blocks():
    """Zeroing the sealed blocks' codes moves the output (the kernel reads them, not an f16 copy), and the
    twin over the same zeroed codes agrees again."""
    g = torch.Generator().manual_seed(6)
    ours, theirs, meta = _step("q8_0", 2, 32, [(40, 1)], g)
    q = torch.randn(1, 4, 32, generator=g)
    before = quantized_attention(q.to(DEV), ours, meta, 0.5).cpu()
    ours.store["k"]["raw"].zero_()
    theirs.store["k"]["raw"].zero_()
    after = quantized_attention(q.to(DEV), ours, meta, 0.5).cpu()
    assert (before - after).abs().max() > 1e-2
    torch.testing.assert_close(after, paged_attention_quantized_torch(q, theirs, meta, 0.5), atol=ATOL, rtol=0)


def test_a_sealed_block_named_twice_is_caught():
    codec = get_codec("fp8_e4m3")
    store = {p: {n: _on_dev((4, *s), t) for n, (s, t) in f.items()} for p, f in codec.fields(16, 1, 32).items()}
    message = r"kernel fp8_encode_kernel: output 'k_values': its rows overlap \('seal' names row 2 twice\)"
    with pytest.raises(LaunchError, match=message):
        encode_blocks("fp8_e4m3", torch.zeros(2, 2, 16, 1, 32, dtype=torch.float16, device=DEV),
                      torch.tensor([2, 2], device=DEV), store)


def test_formats_without_kernels_are_named():
    assert refusal(get_codec("fp8_e4m3")) is None and refusal(get_codec("q8_0")) is None
    for name in set(QUANTIZED) - set(NAMES):
        assert f"no Triton kernels for the KV format {name} yet" in refusal(get_codec(name))


def test_trees_are_refused_over_a_quantized_cache():
    g = torch.Generator().manual_seed(7)
    ours, _, meta = _step("fp8_e4m3", 1, 32, [(3, 2)], g)
    meta.trees = {0: (1, [-1])}
    with pytest.raises(UnsupportedError, match="verifies chains only"):
        quantized_attention(torch.zeros(2, 2, 32, device=DEV), ours, meta, 0.5)
