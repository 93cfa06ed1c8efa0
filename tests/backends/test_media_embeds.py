"""Image rows through the engine and the runner on tiny random models, with a fake encoder (fixed random
rows): the logits equal transformers' on the same embeddings (inputs_embeds: the token embeddings, scaled
as the model does, with the image rows written over them unscaled), causal or bidirectional (a hand-built
4-D mask: causal, and the window, OR the same image); chunked prefill at several budgets equals one
step; the prefix cache and the disk tier hit only for the same digest; speculation stays lossless; a
LoRA adapter, pooling, prompt logprobs and a quantized KV cache take images too. Tiered: a step holding
bidirectional rows leaves the native kernels and fused layers for the torch attention."""

from __future__ import annotations

import pytest
import torch
import transformers

from hearth import LLM, SamplingParams
from hearth.layers.linear import use_linear_policy
from hearth.media.inputs import MediaInput
from hearth.runner.messages import ScheduledSequence, SchedulerOutput

from tests.gguf_factory import SPECULATES, tiny_dir
from tests.models.test_logits_vs_transformers import tf_overrides

REL_TOL = 1e-3  # exact linears on both sides, hearth's K/V in f16 (measured 2e-4 here; an image's rows
# written unscaled where the model scales its token embeddings, or the wrong mask, move them by 1e-2 and more)
PROMPT = [5 + (7 * i) % 300 for i in range(26)]
IMAGE_AT, IMAGE_LEN = 6, 10  # rows 6..15: longer than gemma3's tiny window (8), cut by 4-token blocks
PLACEHOLDER = 3


class FakeEncoder:
    """encode(pixels) -> fixed random rows: pixels is (seed, rows); counts its calls."""

    def __init__(self, hidden: int):
        self.hidden, self.calls = hidden, 0

    def encode(self, pixels) -> torch.Tensor:
        self.calls += 1
        seed, rows = pixels
        return torch.randn(rows, self.hidden, generator=torch.Generator().manual_seed(seed))


def image(seed: int = 1, bidirectional: bool = False, digest: bytes | None = None) -> MediaInput:
    return MediaInput(IMAGE_AT, IMAGE_LEN, digest or bytes([seed]), (seed, IMAGE_LEN), bidirectional)


def prompt_ids() -> list[int]:
    ids = list(PROMPT)
    ids[IMAGE_AT:IMAGE_AT + IMAGE_LEN] = [PLACEHOLDER] * IMAGE_LEN
    return ids


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def tiny(request, tmp_path_factory):
    """(arch, LLM with a fake encoder, transformers' model, dims)."""
    arch = request.param
    d, name, dims = tiny_dir(tmp_path_factory.mktemp(arch), arch)
    with use_linear_policy(exact=True):
        llm = LLM(str(d / name), max_model_len=128, block_size=4, progress=False, max_num_batched_tokens=64,
                  max_num_seqs=1)  # a bidirectional span may take a whole step alone (check_media)
    attach(llm, FakeEncoder(dims.hidden))
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, dtype=torch.float32, attn_implementation="eager", **tf_overrides(arch, dims)).eval()
    return arch, llm, hf, dims


def attach(llm: LLM, encoder) -> None:
    llm.engine.runner.set_vision(encoder)


def hf_logits(hf, dims, ids: list[int], media: list[MediaInput], bidirectional: bool) -> torch.Tensor:
    """[T, vocab]: transformers on the prompt's embeddings with the image rows written over them."""
    with torch.no_grad():
        x = hf.get_input_embeddings()(torch.tensor([ids]))  # gemma3's scales inside
        for m in media:
            x[0, m.offset:m.end] = FakeEncoder(dims.hidden).encode(m.pixels)
        T = len(ids)
        pos = torch.arange(T)
        causal = pos[None, :] <= pos[:, None]
        span = torch.zeros(T, T, dtype=torch.bool)
        for m in media:
            if m.bidirectional:
                span[m.offset:m.end, m.offset:m.end] = True

        def additive(mask):
            return torch.zeros(1, 1, T, T).masked_fill(~mask, torch.finfo(torch.float32).min)

        kw = {}
        if bidirectional:
            full = additive(causal | span)
            kw["attention_mask"] = full
            if getattr(hf.config, "sliding_window", None) and "sliding_attention" in set(hf.config.layer_types):
                near = (pos[:, None] - pos[None, :]) < hf.config.sliding_window
                kw["attention_mask"] = {"full_attention": full, "sliding_attention": additive(causal & near | span)}
        return hf(inputs_embeds=x, **kw).logits[0]


def runner_logits(llm: LLM, ids: list[int], media: list[MediaInput], params=None) -> torch.Tensor:
    """[T, vocab]: the runner's forward over the whole prompt in one step (fresh blocks, then forgotten)."""
    runner, bs = llm.engine.runner, llm.engine.scheduler.kv.block_size
    seq = ScheduledSequence("ref", ids, 0, list(range(-(-len(ids) // bs))), False, params or SamplingParams(), [],
                            media=list(media))
    try:
        with torch.inference_mode():
            return llm.engine.runner.model.compute_logits(runner.forward(SchedulerOutput([seq])))
    finally:
        runner.forget(["ref"])


def rel_err(a, b) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("bidirectional", [False, True], ids=["causal", "bidirectional"])
def test_logits_equal_transformers_on_the_same_embeddings(tiny, bidirectional):
    arch, llm, hf, dims = tiny
    media = [image(1, bidirectional)]
    ours = runner_logits(llm, prompt_ids(), media)
    ref = hf_logits(hf, dims, prompt_ids(), media, bidirectional)
    assert rel_err(ours, ref) < REL_TOL
    # teeth: without the rows, or with the other mask, the logits after the image's first row move
    plain = hf_logits(hf, dims, prompt_ids(), [], False)
    assert rel_err(ours[IMAGE_AT:], plain[IMAGE_AT:]) > 0.01
    other = hf_logits(hf, dims, prompt_ids(), [image(1, not bidirectional)], not bidirectional)
    assert rel_err(ours[IMAGE_AT:], other[IMAGE_AT:]) > 1e-3
    assert rel_err(ours[:IMAGE_AT], other[:IMAGE_AT]) < REL_TOL  # before the image: the same


def generate(llm: LLM, media, budget: int = 64, **kw):
    """Greedy tokens and their logprobs through the engine, nothing cached before; (tokens, logprobs, cached)."""
    engine = llm.engine
    engine.scheduler.kv.pool.reset_prefix_cache()
    return run(llm, media, budget, **kw)


def run(llm: LLM, media, budget: int = 64, ids=None, **kw):
    engine = llm.engine
    engine.scheduler.max_num_batched_tokens = budget
    try:
        params = SamplingParams(**{"temperature": 0, "max_tokens": 6, "ignore_eos": True, "logprobs": 3, **kw})
        rid = engine.add_request(ids or prompt_ids(), params, media=media)
        tokens, logprobs, cached = [], [], None
        while engine.has_unfinished():
            for o in engine.step():
                assert o.request_id == rid
                tokens += o.new_token_ids
                logprobs += o.new_logprobs
                cached = o.num_cached_tokens
        return tokens, logprobs, cached
    finally:
        engine.scheduler.max_num_batched_tokens = 64


def assert_same(a, b, tol: float = 1e-4):
    """Equal tokens, logprobs within f32 summation order (a chunk's rows sum in other blocks: ~4e-6 relative)."""
    assert a[0] == b[0]
    for x, y in zip(a[1], b[1]):
        assert x.keys() == y.keys() and all(abs(x[t] - y[t]) <= tol + 1e-5 * abs(y[t]) for t in x), (x, y)


@pytest.mark.parametrize("bidirectional", [False, True], ids=["causal", "bidirectional"])
def test_the_engines_first_token_is_transformers_and_chunked_prefill_changes_nothing(tiny, bidirectional):
    arch, llm, hf, dims = tiny
    media = [image(2, bidirectional)]
    whole = generate(llm, media)
    ref = torch.log_softmax(hf_logits(hf, dims, prompt_ids(), media, bidirectional)[-1], -1)
    first = whole[1][0]
    assert whole[0][0] == int(ref.argmax())
    assert all(abs(lp - ref[t].item()) < 1e-3 for t, lp in first.items())
    for budget in ((10, 13, 17) if bidirectional else (3, 5, 8, 11)):
        assert_same(generate(llm, media, budget), whole)
    assert whole[0] != generate(llm, [])[0] or whole[1] != generate(llm, [])[1]


def test_the_prefix_cache_hits_for_the_same_image_only(tiny):
    arch, llm, hf, dims = tiny
    kv, encoder = llm.engine.scheduler.kv, llm.engine.runner.vision
    first = generate(llm, [image(3)])
    calls = encoder.calls
    again = run(llm, [image(3)])
    assert again[2] == 24 and encoder.calls == calls  # every full block but the last token's: no encoding
    assert_same(again, first)
    other = run(llm, [image(4)])  # the same placeholder ids, another image
    assert other[2] == 4  # the block before the image's first row only
    assert_same(other, generate(llm, [image(4)]))
    assert other[0] != first[0] or other[1] != first[1]
    hits = kv.stats.hits
    run(llm, [image(4)])
    assert kv.stats.hits - hits == 24


def test_bidirectional_image_and_the_prefix_cache(tiny):
    """A hit that would end inside the span is cut back to the block before it; the output is the miss's."""
    arch, llm, hf, dims = tiny
    ids = prompt_ids()[:14]  # the prompt ends inside the image's span: a hit could only end in it
    media = [MediaInput(IMAGE_AT, 8, b"b", (5, 8), True)]  # rows 6..13
    first = generate(llm, media, ids=ids)
    again = run(llm, media, ids=ids)
    assert again[2] == 4
    assert_same(again, first)


REL_TOL_FAST = 2e-2  # the fast linear paths round activations to bf16 (tests/models/test_logits_vs_transformers.py's)


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def tiny_fast(request, tmp_path_factory):
    """(arch, LLM on the tier's fast paths over Q8_0 weights: the fused C++ layers and stack, the native
    attention; transformers' model of the same file, dims)."""
    arch = request.param
    # llama's default head_dim 16 runs torch's attention, where speculation is off: heads the native kernels take
    d, name, dims = tiny_dir(tmp_path_factory.mktemp(arch), arch, qtype="Q8_0", **(SPECULATES if arch == "llama" else {}))
    llm = LLM(str(d / name), max_model_len=128, block_size=4, progress=False, max_num_batched_tokens=128)
    attach(llm, FakeEncoder(dims.hidden))
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, dtype=torch.float32, attn_implementation="eager", **tf_overrides(arch, dims)).eval()
    return arch, llm, hf, dims


@pytest.mark.parametrize("length", [26, 80], ids=["decode-sized", "prefill-sized"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["causal", "bidirectional"])
def test_the_fast_paths_step_aside_for_bidirectional_rows(tiny_fast, bidirectional, length):
    """A step of fewer rows than the fused layers' prefill GEMMs runs the whole stack in one C++ call
    (causal attention inside), a longer one the tile kernels where the CPU has them: a step holding
    bidirectional rows must leave both for the torch attention (the causal one stays on them)."""
    arch, llm, hf, dims = tiny_fast
    ids = (prompt_ids() * 4)[:length]
    media = [image(7, bidirectional)]
    ours = runner_logits(llm, ids, media)
    assert rel_err(ours, hf_logits(hf, dims, ids, media, bidirectional)) < REL_TOL_FAST
    other = hf_logits(hf, dims, ids, [image(7, not bidirectional)], not bidirectional)
    assert rel_err(ours[IMAGE_AT:], other[IMAGE_AT:]) > 0.1


@pytest.mark.parametrize("spec", ["ngram", "draft"])
def test_speculation_over_a_prompt_with_images_is_lossless(tiny_fast, spec):
    """The proposers read the placeholder ids as text (a draft model computes its own K/V over them):
    drafts may be worse, greedy output is the same (the native paths, where a verify row is a decode row)."""
    arch, llm, hf, dims = tiny_fast
    config = ({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1} if spec == "ngram" else
              {"method": "draft", "model": llm.config.model, "num_speculative_tokens": 3})
    config["cost_aware"] = False  # drafts every step, whatever they would pay on this machine
    spec_llm = LLM(llm.config.model, max_model_len=128, block_size=4, progress=False, speculative_config=config,
                   max_num_batched_tokens=128)
    if spec_llm.speculation_off:  # the torch tier (HEARTH_NATIVE=0): verify rows are not decode rows
        pytest.skip(spec_llm.speculation_off)
    attach(spec_llm, FakeEncoder(dims.hidden))
    ids = prompt_ids() * 2  # text that repeats: the n-gram proposer finds drafts
    for bidirectional in (False, True):
        media = [image(6, bidirectional)]
        want = generate(llm, media, 128, ids=ids, max_tokens=24)[0]
        assert generate(spec_llm, media, 128, ids=ids, max_tokens=24)[0] == want
    assert spec_llm.engine.spec.stats.num_draft_tokens > 0


def test_the_disk_tier_keys_image_blocks_by_digest(tiny, tmp_path):
    """Blocks saved by one process are found by the next for the same image only (the same hashes)."""
    arch, llm, hf, dims = tiny
    runs = []
    for _ in range(2):
        with use_linear_policy(exact=True):
            disk_llm = LLM(llm.config.model, max_model_len=128, block_size=4, progress=False,
                           kv_disk_dir=str(tmp_path / "kv"), kv_disk_space_mb=16)
        attach(disk_llm, FakeEncoder(dims.hidden))
        runs.append((run(disk_llm, [image(8)]), run(disk_llm, [image(9)]) if runs else None,
                     disk_llm.engine.scheduler.kv.stats.disk_hits))
        disk_llm.close()
    (first, _, _), (again, other, disk_hits) = runs
    assert again[2] == 24 and disk_hits == 24  # the same image: all from disk
    assert other[2] == 4  # another: the block before it only (in memory by then)
    assert_same(again, first)
    assert other[0] != first[0] or other[1] != first[1]


def test_prompt_logprobs_and_pooling_read_the_image_rows(tiny):
    arch, llm, hf, dims = tiny
    with_image = run(llm, [image(10)], prompt_logprobs=0, max_tokens=1)
    plain = run(llm, [], prompt_logprobs=0, max_tokens=1)
    assert with_image[0] != plain[0] or with_image[1] != plain[1]
    engine = llm.engine
    vectors = []
    for media in ([image(10)], [image(11)], []):
        rid = engine.add_request(prompt_ids(), SamplingParams(max_tokens=1, temperature=0, pooling="mean"),
                                 media=media)
        while engine.has_unfinished():
            vectors += [o.embedding for o in engine.step() if o.request_id == rid and o.finished]
    a, b, c = (torch.tensor(v) for v in vectors)
    assert (a - b).abs().max() > 1e-3 and (a - c).abs().max() > 1e-3


@pytest.mark.parametrize("query_span", [256, 16], ids=["one-query-span", "query-spans-of-16"])
def test_a_quantized_kv_cache_attends_bidirectional_rows_as_an_f16_one(tmp_path, monkeypatch, query_span):
    """The span computed in a later chunk (its first rows' block sealed: read decoded) and, with
    QUANTIZED_SPAN 16, queried in pieces that must see the span's keys past their own end."""
    from hearth.kernels import attention

    monkeypatch.setattr(attention, "QUANTIZED_SPAN", query_span)
    d, name, dims = tiny_dir(tmp_path, "gemma3")
    ids = (prompt_ids() * 4)[:100]
    first = {}
    for kv in ("f16", "q8_0"):
        model = LLM(str(d / name), max_model_len=128, block_size=16, progress=False, kv_cache_dtype=kv,
                    max_num_batched_tokens=48, max_num_seqs=1)
        attach(model, FakeEncoder(dims.hidden))
        for bidirectional in (False, True):  # rows 36..75: chunks 0..35, 36..83 (the span whole), 84..99
            media = [MediaInput(36, 40, b"q", (15, 40), bidirectional)]
            first[kv, bidirectional] = torch.tensor(list(generate(model, media, 48, ids=ids)[1][0].values()))
    # 8-bit K/V: 0.03-0.04 off the f16 cache's logprobs here; bidirectional against causal: 0.35
    for bidirectional in (False, True):
        assert (first["q8_0", bidirectional] - first["f16", bidirectional]).abs().max() < 0.1
    assert (first["q8_0", True] - first["q8_0", False]).abs().max() > 0.2


@pytest.mark.parametrize("bidirectional", [False, True], ids=["causal", "bidirectional"])
def test_a_lora_adapter_with_images_runs_the_merged_model(tmp_path, bidirectional):
    from tests.gguf_factory import write_tiny_gguf
    from tests.lora_factory import merged, write_lora_gguf
    from tests.models.test_lora import ALPHA, RANK, targets

    dims = write_tiny_gguf(tmp_path / "base.gguf", "llama")
    pairs = write_lora_gguf(tmp_path / "adapter.gguf", tmp_path / "base.gguf", targets("llama"), RANK, ALPHA)
    write_tiny_gguf(tmp_path / "merged.gguf", "llama", adjust=merged(pairs, 1.0, ALPHA))
    out = {}
    for name, kw in (("merged", {}), ("lora", {"lora": [(str(tmp_path / "adapter.gguf"), 1.0)]})):
        with use_linear_policy(exact=True):
            model = LLM(str(tmp_path / ("merged.gguf" if name == "merged" else "base.gguf")), max_model_len=128,
                        block_size=4, progress=False, **kw)
        attach(model, FakeEncoder(dims.hidden))
        out[name] = run(model, [image(13, bidirectional)])
    assert_same(out["lora"], out["merged"], tol=1e-3)  # x(W + BA) against xW + (xB)A: ~2e-4 apart


def test_llm_generate_and_stream_take_media_in_a_tokens_prompt(tiny, tmp_path):
    arch, llm, hf, dims = tiny
    want = generate(llm, [image(14)])
    prompt = {"prompt_token_ids": prompt_ids(), "media": [image(14)]}
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    assert llm.generate(prompt, params)[0].outputs[0].token_ids == want[0]
    assert sum((o.new_token_ids for o in llm.stream(prompt, params)), []) == want[0]
    from hearth.engine.engine_core import InvalidPromptError

    text_only = LLM(llm.config.model, max_model_len=128, block_size=4, progress=False)
    with pytest.raises(InvalidPromptError, match="reads text only: images need a vision encoder"):
        text_only.generate(prompt, params)


def test_the_fused_lora_stack_steps_aside_for_bidirectional_rows(tmp_path):
    """With an adapter on, a decode-sized step runs the fused LoRA stack (causal attention inside)."""
    from tests.gguf_factory import write_tiny_gguf
    from tests.lora_factory import merged, write_lora_gguf
    from tests.models.test_lora import ALPHA, RANK, targets

    dims = write_tiny_gguf(tmp_path / "base.gguf", "gemma3", qtype="Q8_0")
    pairs = write_lora_gguf(tmp_path / "adapter.gguf", tmp_path / "base.gguf", targets("llama", dims.layers), RANK,
                            ALPHA)  # gemma3 names its matrices as llama does
    write_tiny_gguf(tmp_path / "merged.gguf", "gemma3", qtype="Q8_0", adjust=merged(pairs, 1.0, ALPHA))
    lora = LLM(str(tmp_path / "base.gguf"), max_model_len=128, block_size=4, progress=False,
               lora=[(str(tmp_path / "adapter.gguf"), 1.0)])
    whole = LLM(str(tmp_path / "merged.gguf"), max_model_len=128, block_size=4, progress=False)
    logits = {}
    for name, model, params in (("lora", lora, SamplingParams(lora={0: 1.0})), ("merged", whole, None)):
        attach(model, FakeEncoder(dims.hidden))
        for bidirectional in (False, True):
            logits[name, bidirectional] = runner_logits(model, prompt_ids(), [image(5, bidirectional)], params)
    for bidirectional in (False, True):  # the merged file's weights quantized anew: 0.02-0.03 apart here
        assert rel_err(logits["lora", bidirectional], logits["merged", bidirectional]) < 0.1
    assert rel_err(logits["lora", True][IMAGE_AT:], logits["lora", False][IMAGE_AT:]) > 0.1


class BadImages(FakeEncoder):
    """FakeEncoder that raises on seed 66 and makes a row too few on seed 67."""

    def encode(self, pixels) -> torch.Tensor:
        if pixels[0] == 66:
            raise RuntimeError("the tower fell over")
        rows = super().encode(pixels)
        return rows[:-1] if pixels[0] == 67 else rows


@pytest.mark.parametrize("bad", [66, 67], ids=["encoder-raises", "rows-short"])
def test_a_bad_image_ends_its_request_only(tiny, bad):
    """Its request ends with a MediaEncodeError naming why; the step's other request goes on, as it
    would alone, and none of the bad one's blocks with image rows is cached."""
    from hearth.api.errors import from_hearth_error
    from hearth.engine.engine_core import MediaEncodeError

    arch, llm, hf, dims = tiny
    engine, vision = llm.engine, llm.engine.runner.vision
    want = generate(llm, [image(20)])
    engine.scheduler.kv.pool.reset_prefix_cache()
    attach(llm, BadImages(dims.hidden))
    engine.scheduler.max_num_seqs = 2
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=3)
    other_ids = [9] + prompt_ids()[1:]  # another first block: admitted beside it, not after it
    try:
        good = engine.add_request(prompt_ids(), params, media=[image(20)])
        failed = engine.add_request(other_ids, params, media=[image(bad)])
        first = []  # the encode runs beside the steps (MediaRows' worker): its failure comes in a step or a few
        for _ in range(50):
            first += engine.step()
            if any(o.request_id == failed for o in first):
                break
        (err,) = [o for o in first if o.request_id == failed]
        assert err.finished and isinstance(err.error, MediaEncodeError)
        assert "could not be encoded" in str(err.error)
        assert ("the tower fell over" if bad == 66 else "rows (9, ") in str(err.error)
        assert from_hearth_error(err.error).status == 500  # the server's encoder failed, not the request
        tokens, logprobs = [], []
        outs = first
        while True:
            for o in outs:
                assert o.request_id != failed or o is err
                if o.request_id == good:
                    tokens += o.new_token_ids
                    logprobs += o.new_logprobs
            if not engine.has_unfinished():
                break
            outs = engine.step()
        assert_same((tokens, logprobs), want)
        attach(llm, vision)
        # no block holding the failed image's rows was cached (the text before it may be: images encode beside the
        # steps, and that text's K/V, prefilled meanwhile, does not depend on the image)
        assert run(llm, [image(bad)], ids=other_ids)[2] <= IMAGE_AT
    finally:
        engine.scheduler.max_num_seqs = 1
        attach(llm, vision)
