"""LLM over an encoder (bert, nomic-bert): embed() batches whole inputs into forwards within
max_num_seqs / max_num_batched_tokens (hearth.runner.encoder_runner), each vector the model's own
pooled output whatever batch it ran in; text generation is one clear error; `hearth run` refuses it."""

from __future__ import annotations

import pytest
import torch

from hearth.cli import main as cli_main
from hearth.engine.encoder_core import EmbeddingOnlyError
from hearth.llm import LLM
from hearth.models.encoder import pooled
from hearth.runner.encoder_runner import EncoderRunner
from hearth.sampling_params import SamplingParams
from tests.bert_factory import write_tiny_encoder

TEXTS = ["the capital of france is paris", "hello", "an embedding model for search queries and documents",
         "hello world", "unbelievable café 中文", "it", "the document"]


@pytest.fixture(scope="module", params=[("bert", 2), ("nomic-bert", 1)], ids=["bert-cls", "nomic-bert-mean"])
def encoder_file(request, tmp_path_factory):
    arch, pooling_type = request.param
    path = tmp_path_factory.mktemp(arch) / f"tiny-{arch}.gguf"
    write_tiny_encoder(path, arch, pooling_type=pooling_type)
    return path


def alone(llm: LLM, text: str, pooling: str) -> list[float]:
    ids = llm.tokenizer.encode(text)
    with torch.inference_mode():
        return pooled(llm.model(torch.tensor([ids]), torch.tensor([len(ids)])), torch.tensor([len(ids)]),
                      [pooling])[0].tolist()


def test_embed_in_small_batches_is_each_input_alone(encoder_file):
    llm = LLM(str(encoder_file), max_num_seqs=2, max_num_batched_tokens=24, progress=False)
    out = llm.embed(TEXTS)
    assert [o.prompt_token_ids for o in out] == [llm.tokenizer.encode(t) for t in TEXTS]
    for o, text in zip(out, TEXTS):
        torch.testing.assert_close(torch.tensor(o.outputs.embedding), torch.tensor(alone(llm, text, llm.model_config.pooling)),
                                   rtol=0, atol=1e-5)
    mean = llm.embed(TEXTS[:1], pooling="mean")[0].outputs.embedding  # the caller's pooling over the file's
    torch.testing.assert_close(torch.tensor(mean), torch.tensor(alone(llm, TEXTS[0], "mean")), rtol=0, atol=1e-5)
    llm.close()


def test_text_generation_is_refused(encoder_file):
    llm = LLM(str(encoder_file), progress=False)
    for call in (lambda: llm.generate("hello", SamplingParams(max_tokens=4)),
                 lambda: llm.chat([{"role": "user", "content": "hi"}])):
        with pytest.raises(EmbeddingOnlyError, match=r"is an embedding model: it serves embeddings"):
            call()
    with pytest.raises(Exception, match=r"context holds 64"):  # the whole context is the prompt's, no more
        llm.embed({"prompt_token_ids": [101] * 65})
    assert len(llm.embed({"prompt_token_ids": [101] * 64})[0].outputs.embedding) == 64
    llm.close()


def test_batches_keep_both_limits():
    r = EncoderRunner(None, max_num_seqs=3, max_num_batched_tokens=20)
    lengths = [5, 1, 30, 4, 4, 6, 2]
    batches = r.batches(lengths)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3 and (len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 20)
    assert [2] in batches  # longer than a batch holds: alone


def test_hearth_run_refuses_an_embedding_model(encoder_file, capsys):
    assert cli_main(["run", str(encoder_file), "hello"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "is an embedding model" in err[-1] and "hearth serve" in err[-1] and "Traceback" not in "".join(err)


def test_served_footprint_has_no_kv_cache(encoder_file):
    """The memory planner counts an encoder's weights and activations, never a KV cache it has not."""
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.memory.serving import served_footprint

    f = served_footprint(GGUFFile(encoder_file), 0, "auto", 16, 2.0)
    assert f.kv == 0 and f.weights > 0 and f.context == 64


def test_a_cluster_replica_refuses_it_in_one_line(encoder_file):
    from hearth.cluster.replica import LoadFailure, Replica

    result = Replica(str(encoder_file), {}, max_queued=1).ready()
    assert isinstance(result, LoadFailure) and "is an embedding model" in result.message
    assert "--replicas" in result.message
