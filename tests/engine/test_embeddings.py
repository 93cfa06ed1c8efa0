"""SamplingParams.pooling (LLM.embed, /v1/embeddings): a prompt's final hidden states pooled by the
engine, against the model's own hidden states over the whole prompt in one prefill: through chunked
prefill, beside other requests, and after the prompt is in the prefix cache ("mean" must compute every
row again); the model's pooling read from its GGUF."""

from __future__ import annotations

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.engine.request import Request
from hearth.kernels.attention import AttentionMetadata
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.registry import model_class
from hearth.sampling_params import InvalidSamplingParams
from tests.gguf_factory import write_tiny_gguf

PROMPT = [(7 * i + 3) % 200 + 5 for i in range(40)]  # 3 chunks of at most 16 tokens
OTHER = [(11 * i + 5) % 200 + 5 for i in range(23)]
ATOL = 1e-4
"""Chunked prefill against one prefill of the same f32 model: their sums differ in the last bits."""


def hidden_of(llm: LLM, ids: list[int]) -> torch.Tensor:
    """[len(ids), hidden]: the final hidden states of one prefill over the paged cache's first blocks."""
    T, bs = len(ids), llm.config.block_size
    meta = AttentionMetadata([0, T], [T], [list(range(-(-T // bs)))], torch.arange(T), bs)
    with torch.inference_mode():
        return llm.model(torch.tensor(ids), torch.arange(T), meta, llm.runner.kv_caches).float()


def unit(v: torch.Tensor) -> list[float]:
    return (v / v.norm()).tolist()


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama")
    return LLM(str(path), max_model_len=256, max_num_seqs=4, max_num_batched_tokens=16, progress=False)


@pytest.fixture(scope="module")
def reference(llm) -> dict[str, list[float]]:
    """Computed before the engine runs: it writes the cache's first blocks."""
    h, o = hidden_of(llm, PROMPT), hidden_of(llm, OTHER)
    return {"last": unit(h[-1]), "mean": unit(h.mean(0)), "other_mean": unit(o.mean(0))}


@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_embedding_is_the_pooled_hidden_states(llm, reference, pooling):
    (out,) = llm.embed([{"prompt_token_ids": PROMPT}], pooling=pooling)
    e = out.outputs.embedding  # vLLM's shape
    assert out.prompt_token_ids == PROMPT and out.outputs.hidden_size == len(reference[pooling])
    assert e == pytest.approx(reference[pooling], abs=ATOL)
    assert sum(x * x for x in e) == pytest.approx(1.0)


def test_mean_computes_every_row_again_after_a_cache_hit(llm, reference):
    llm.generate([{"prompt_token_ids": PROMPT}], SamplingParams(max_tokens=1))  # the prompt's blocks cached
    out = llm.generate([{"prompt_token_ids": PROMPT}], SamplingParams(max_tokens=1, pooling="mean"))[0]
    assert out.num_cached_tokens == 0
    assert out.embedding == pytest.approx(reference["mean"], abs=ATOL)
    last = llm.generate([{"prompt_token_ids": PROMPT}], SamplingParams(max_tokens=1, pooling="last"))[0]
    assert last.num_cached_tokens > 0  # the last row is computed anyway: "last" takes the hit
    assert last.embedding == pytest.approx(reference["last"], abs=ATOL)


def test_embeddings_beside_generation(llm, reference):
    """Two embeddings and a request that generates share steps: each is what it is alone."""
    outs = llm.generate([{"prompt_token_ids": OTHER}, {"prompt_token_ids": PROMPT}, {"prompt_token_ids": OTHER}],
                        [SamplingParams(max_tokens=1, pooling="mean"), SamplingParams(max_tokens=1, pooling="last"),
                         SamplingParams(max_tokens=8, temperature=0.0)])
    assert outs[0].embedding == pytest.approx(reference["other_mean"], abs=ATOL)
    assert outs[1].embedding == pytest.approx(reference["last"], abs=ATOL)
    assert outs[2].embedding is None and len(outs[2].outputs[0].token_ids) == 8


def test_pooling_is_checked(llm):
    with pytest.raises(InvalidSamplingParams, match="pooling must be one of last, mean, cls, rank, got 'max'"):
        SamplingParams(max_tokens=1, pooling="max")
    # cls is an encoder's (hearth.models.encoder): a decoder's first token has seen nothing else
    with pytest.raises(InvalidSamplingParams, match="cls pools an encoder's first token"):
        llm.generate({"prompt_token_ids": PROMPT}, SamplingParams(max_tokens=1, pooling="cls"))
    # rank is a reranker's classification head (hearth.models.classifier_head): a decoder has none
    with pytest.raises(InvalidSamplingParams, match=r"this model is not a reranker \(a text generation model\)"):
        llm.generate({"prompt_token_ids": PROMPT}, SamplingParams(max_tokens=1, pooling="rank"))
    with pytest.raises(InvalidSamplingParams, match="pair_start needs pooling 'rank'"):
        SamplingParams(max_tokens=1, pooling="mean", pair_start=3)
    with pytest.raises(InvalidSamplingParams, match="pooling needs max_tokens 1"):  # decode rows are no prompt's
        SamplingParams(max_tokens=4, pooling="mean")


@pytest.mark.parametrize("pooling_type, expected", [(None, "last"), (1, "mean"), (3, "last"), (2, "last")])
def test_pooling_from_the_gguf(tmp_path, pooling_type, expected):
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, "qwen2", pooling_type=pooling_type)
    g = GGUFFile(path)
    assert model_class(g.arch).config_from_gguf(g).pooling == expected


def test_a_recompute_from_position_zero_starts_the_sum_over():
    """A preempted request computes its prompt again from position 0 ("mean" takes no cache hit)."""
    req = Request("r", PROMPT[:3], SamplingParams(max_tokens=1, pooling="mean"), frozenset(), 64)
    req.add_pooled(0, [1.0, 2.0])
    req.add_pooled(2, [3.0, 4.0])
    assert req.pooled == [4.0, 6.0]
    req.add_pooled(0, [1.0, 1.0])  # preempted, recomputed
    req.add_pooled(2, [2.0, 1.0])
    assert req.pooled == [3.0, 2.0] and req.embedding() == pytest.approx([1.0 / 13 ** 0.5 * 3, 2.0 / 13 ** 0.5])
