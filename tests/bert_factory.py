"""Tiny random BERT-family GGUFs (archs `bert`, `nomic-bert`), written as llama.cpp's converter writes
real ones (convert_hf_to_gguf.py BertModel / NomicBertModel), with a WordPiece vocabulary in its
"phantom space" spelling: a word start "w" stored as "\u2581w", a continuation "##w" as "w".

The vocabulary is BERT's layout ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103) so llama.cpp's
defaults for a file that names no special ids hold too; `hf_vocab()` is the same list as Hugging Face
spells it, for transformers' BertTokenizer."""

from __future__ import annotations

import gguf
from gguf import TokenType

SPECIALS = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
WORDS = ("the capital of france is paris hello world un believ cafe naive don t s it an embed ding model "
         "search query document token izer 2024 42 hearth . , ! ? ' - ( ) : ; \" $ % & * + = @ # / "
         "中 文 日 本 語 한 국 é ü")
PIECES = "##believ ##able ##s ##ing ##ed ##ly ##er ##iz ##ation ##ding ##ment ##e ##a ##t ##o ##n ##r ##x ##y ##z ##4 ##2"


def hf_vocab(size: int = 0) -> list[str]:
    """WordPiece tokens by id as BERT's vocab.txt lists them; `size`: padded with [unusedN] to it."""
    tokens = [SPECIALS.get(i, f"[unused{i - 1}]") for i in range(104)]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    for t in letters + ["##" + c for c in letters] + WORDS.split() + PIECES.split():
        if t not in tokens:
            tokens.append(t)
    tokens += [f"[unused{i}]" for i in range(len(tokens), size)]
    return tokens


def phantom(token: str) -> str:
    """convert_hf_to_gguf.py BertModel.set_vocab's spelling of one WordPiece token."""
    if token.startswith("[") and token.endswith("]"):
        return token
    return token[2:] if token.startswith("##") else "\u2581" + token


def write_bert_tokenizer(w: gguf.GGUFWriter, tokens: list[str], *, name_specials: bool = True) -> None:
    """The tokenizer section a converted BERT GGUF has; name_specials False: no special ids, no flags
    (an older file: llama.cpp's WPM defaults apply)."""
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list([phantom(t) for t in tokens])
    w.add_token_types([TokenType.CONTROL if i in SPECIALS else TokenType.NORMAL for i in range(len(tokens))])
    w.add_token_type_count(2)
    if name_specials:
        w.add_bos_token_id(101)
        w.add_eos_token_id(102)
        w.add_unk_token_id(100)
        w.add_sep_token_id(102)
        w.add_pad_token_id(0)
        w.add_mask_token_id(103)
        w.add_add_bos_token(True)
        w.add_add_eos_token(True)


# ---- tiny encoder models -----------------------------------------------------------------------

from dataclasses import dataclass, replace  # noqa: E402

import numpy as np  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402

MATRIX_TYPES = {"F32": Q.F32, "F16": Q.F16, "Q8_0": Q.Q8_0}


@dataclass(frozen=True, slots=True)
class EncoderDims:
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    ffn: int = 128
    context: int = 64
    eps: float = 1e-12
    rope_theta: float = 1000.0
    pooling_type: int | None = 1
    """`{arch}.pooling_type` (1 mean, 2 cls, 3 last, 4 rank: a reranker; None: absent)."""
    head: tuple[str, ...] = ("cls", "cls.output")
    """A reranker's (pooling_type 4) classification layers, as llama.cpp names them: `cls` [hidden, hidden]
    (BERT's pooler dense), `cls.output` [1, hidden] (BertForSequenceClassification's classifier)."""

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def write_tiny_encoder(path, arch: str, *, qtype: str = "F32", seed: int = 0, **dims) -> EncoderDims:
    """A random `bert` or `nomic-bert` model with hf_vocab()'s tokenizer, as the converter writes it:
    matrices in `qtype`, norms and biases F32 (nomic-bert: no linear biases, fused qkv, SwiGLU)."""
    d = replace(EncoderDims(), **dims)
    rng = np.random.default_rng(seed)
    tokens = hf_vocab()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}")
    w.add_context_length(d.context)
    w.add_embedding_length(d.hidden)
    w.add_block_count(d.layers)
    w.add_feed_forward_length(d.ffn)
    w.add_head_count(d.heads)
    w.add_layer_norm_eps(d.eps)
    w.add_causal_attention(False)
    if d.pooling_type is not None:
        w.add_pooling_type(gguf.PoolingType(d.pooling_type))
    if arch == "nomic-bert":
        w.add_rope_freq_base(d.rope_theta)
    write_bert_tokenizer(w, tokens)
    for name, value in _encoder_tensors(rng, arch, d, len(tokens)):
        if value.ndim == 1 or qtype == "F32" or name == "token_types.weight":
            w.add_tensor(name, value)
        elif qtype == "F16":
            w.add_tensor(name, value.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(value, MATRIX_TYPES[qtype]), raw_dtype=MATRIX_TYPES[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return d


def _encoder_tensors(rng: np.random.Generator, arch: str, d: EncoderDims, vocab: int):
    """(gguf name, f32 array [out, in]) for every tensor."""
    def matrix(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def vec(n, mean=0.0, sd=0.1):
        return rng.normal(mean, sd, n).astype(np.float32)

    nomic = arch == "nomic-bert"
    yield "token_embd.weight", rng.standard_normal((vocab, d.hidden)).astype(np.float32)
    yield "token_types.weight", rng.standard_normal((2, d.hidden)).astype(np.float32)
    if not nomic:
        yield "position_embd.weight", rng.standard_normal((d.context, d.hidden)).astype(np.float32)
    yield "token_embd_norm.weight", vec(d.hidden, 1.0)
    yield "token_embd_norm.bias", vec(d.hidden)
    for i in range(d.layers):
        p = f"blk.{i}."
        if nomic:
            yield p + "attn_qkv.weight", matrix(3 * d.hidden, d.hidden)
        else:
            for n in ("q", "k", "v"):
                yield p + f"attn_{n}.weight", matrix(d.hidden, d.hidden)
                yield p + f"attn_{n}.bias", vec(d.hidden)
        yield p + "attn_output.weight", matrix(d.hidden, d.hidden)
        if not nomic:
            yield p + "attn_output.bias", vec(d.hidden)
        yield p + "attn_output_norm.weight", vec(d.hidden, 1.0)
        yield p + "attn_output_norm.bias", vec(d.hidden)
        yield p + "ffn_up.weight", matrix(d.ffn, d.hidden)
        if nomic:
            yield p + "ffn_gate.weight", matrix(d.ffn, d.hidden)
        else:
            yield p + "ffn_up.bias", vec(d.ffn)
        yield p + "ffn_down.weight", matrix(d.hidden, d.ffn)
        if not nomic:
            yield p + "ffn_down.bias", vec(d.hidden)
        yield p + "layer_output_norm.weight", vec(d.hidden, 1.0)
        yield p + "layer_output_norm.bias", vec(d.hidden)
    if d.pooling_type == 4:  # after the encoder's: its weights are those of the same seed without a head
        rows = {"cls": d.hidden, "cls.output": 1}
        for name in d.head:  # "cls.norm": ModernBERT's head norm, a vector
            yield name + ".weight", matrix(rows[name], d.hidden) if name in rows else vec(d.hidden, 1.0)
            yield name + ".bias", vec(rows.get(name, d.hidden), sd=0.5)


def read_weights(path) -> dict[str, np.ndarray]:
    """Every tensor of a GGUF as f32 [out, in] (dequantized with gguf-py): what a reference runs."""
    r = gguf.GGUFReader(str(path))
    out = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))
        out[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
    return out


BERT_LAYER_NAMES = {"attention.self.query": "attn_q", "attention.self.key": "attn_k", "attention.self.value": "attn_v",
                    "attention.output.dense": "attn_output", "attention.output.LayerNorm": "attn_output_norm",
                    "intermediate.dense": "ffn_up", "output.dense": "ffn_down", "output.LayerNorm": "layer_output_norm"}
"""transformers' BertLayer module -> the GGUF tensor it comes from (blk.N.NAME)."""


def hf_bert_layers(t: dict, layers: int, prefix: str = "") -> dict:
    """transformers' state-dict entries of every BertLayer, `prefix` before each (BertModel: "", inside a
    BertForSequenceClassification: "bert."), from the GGUF's tensors `t`."""
    return {f"{prefix}encoder.layer.{i}.{hf}.{part}": t[f"blk.{i}.{gg}.{part}"]
            for i in range(layers) for hf, gg in BERT_LAYER_NAMES.items() for part in ("weight", "bias")}
