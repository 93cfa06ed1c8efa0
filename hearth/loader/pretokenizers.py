"""Byte-level BPE pre-tokenizers, keyed by a GGUF's `tokenizer.ggml.pre`.

Each entry is the list of split regexes llama.cpp applies (src/llama-vocab.cpp, llm_tokenizer_bpe),
in order: every regex splits the pieces the previous one produced, keeping both the matches and the
text between them. We run them with Oniguruma (through `tokenizers`) instead of std::regex; the
strings are llama.cpp's ASCII-safe rewrites, which mean the same thing under both engines. The
flags mirror llama.cpp's per-type defaults (`llama_vocab::impl::load`)."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.errors import UnsupportedError

# GPT-2's split. llama.cpp's custom matcher has no trailing `|\s+`; adding it changes nothing (any
# whitespace it would match is left between matches and split off the same way) and makes this the
# canonical GPT-2 pattern.
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Mistral's tekken / GPT-4o: "upper" = a letter that is not a-z, "lower" = a letter not A-Z, the
# rewrite llama.cpp uses in place of \p{Lu}/\p{Ll} (so non-ASCII letters count as both).
_UPPER = r"((?=[\p{L}])([^a-z]))"
_LOWER = r"((?=[\p{L}])([^A-Z]))"
TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
         rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK_LETTERS = (
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
    "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5"
    "\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15"
    "\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d"
    "\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb"
    "\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124"
    "\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184"
    "\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f"
    "\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a"
    "\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
    "\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+"
)
_DEEPSEEK_PUNCT = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
_DEEPSEEK3 = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
              r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# tiny-aya / youtu write \p{Lu}, \p{Ll}...; llama.cpp reads every letter class as \p{L}, so do we
_CASED_WORDS = (rf"[^\r\n\p{{L}}\p{{N}}]?[\p{{L}}\p{{M}}]*[\p{{L}}\p{{M}}]+{_CONTRACTIONS}?"
                rf"|[^\r\n\p{{L}}\p{{N}}]?[\p{{L}}\p{{M}}]+[\p{{L}}\p{{M}}]*{_CONTRACTIONS}?")
_AYA = _CASED_WORDS + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# digit runs in groups of three counted from the right (llama.cpp's custom afmoe/tiny-aya splitter)
_DIGITS_BY_3 = r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))"
_YOUTU_CJK = ("[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c"
              "\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+")
_YOUTU = _CASED_WORDS + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_JAIS2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          + "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4)) + r"|\s{1,2}(?!\S)|\s{1}")
_SPARK = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
          r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+")
_EXAONE_MOE = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")
_UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_CJK_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"


@dataclass(frozen=True, slots=True)
class PreTokenizerSpec:
    regexes: tuple[str, ...]
    ignore_merges: bool = False
    """A whole pre-token that is itself in the vocabulary becomes that token, merges skipped."""
    add_bos: bool = False
    """llama.cpp's default when the GGUF has no tokenizer.ggml.add_bos_token."""
    clean_spaces: bool = True
    """Detokenization drops the space before , . ? ! and some contractions (clean_up_tokenization_spaces)."""
    default_bos: bool = True
    """False where llama.cpp unsets the BOS id unless the GGUF names one (chatglm)."""


_S = PreTokenizerSpec
_DEFAULT = _S((r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"))
_GPT2_SPEC = _S((GPT2,))
_LLAMA3_SPEC = _S((LLAMA3,), ignore_merges=True, add_bos=True)
_QWEN2_SPEC = _S((QWEN2,), clean_spaces=False)
_STARCODER = _S((r"\p{N}", GPT2))
_GPT4O_SPEC = _S((GPT4O,), clean_spaces=False)
_BLOOM_SPEC = _S((_BLOOM,))
_BAILING = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
_SEED_CODER = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

PRE_TOKENIZERS: dict[str, PreTokenizerSpec] = {
    "default": _DEFAULT,
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                     "midm-2.0", "lfm2", "jina-v5-nano"), _LLAMA3_SPEC),
    "dbrx": _S((LLAMA3,)),
    "smaug-bpe": _S((LLAMA3,)),
    "deepseek-llm": _S((r"[\r\n]", _DEEPSEEK_LETTERS, _DEEPSEEK_PUNCT, r"\s+$", _CJK, r"\p{N}+"),
                       clean_spaces=False),
    "deepseek-coder": _S((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"), clean_spaces=False),
    **dict.fromkeys(("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"),
                    _S((r"\p{N}{1,3}", _CJK_KANA, _DEEPSEEK3), clean_spaces=False)),
    "spark2_5": _S((r"\p{N}{1,3}", _CJK_KANA, _SPARK, r"\p{N}"), clean_spaces=False),
    "falcon": _S((r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]")),
    **dict.fromkeys(("starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"), _STARCODER),
    "command-r": _S((r"\p{N}", GPT2), clean_spaces=False),
    "smollm": _S((r"\p{N}", GPT2), clean_spaces=False),
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es",
                     "jina-v2-de", "gigachat", "a.x-4.0", "mellum", "exaone4"), _GPT2_SPEC),
    **dict.fromkeys(("trillion", "granite-docling"), _S((GPT2,), clean_spaces=False)),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "grok-2", "solar-open"),
                    _QWEN2_SPEC),
    "qwen35": _S((QWEN35,), clean_spaces=False),
    "laguna": _S((r"[^\n]+|[\n]+", QWEN2), clean_spaces=False),
    "ufakzeka": _S((_UFAKZEKA,), clean_spaces=False),
    "exaone-moe": _S((_EXAONE_MOE,)),
    "jais-2": _S((_JAIS2,)),
    **dict.fromkeys(("stablelm2", "megrez"), _S((QWEN2,))),
    "poro-chat": _S((_BLOOM,), clean_spaces=False),
    **dict.fromkeys(("bloom", "gpt3-finnish"), _BLOOM_SPEC),
    "viking": _S((_BLOOM, r"\p{N}"), clean_spaces=False),
    **dict.fromkeys(("chatglm-bpe", "glm4"), _S((LLAMA3,), default_bos=False)),
    "glm5": _S((LLAMA3,), default_bos=False, ignore_merges=True),
    "tekken": _S((TEKKEN,), ignore_merges=True, add_bos=True, clean_spaces=False),
    **dict.fromkeys(("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), _GPT4O_SPEC),
    **dict.fromkeys(("tiny_aya", "cohere2moe"), _S((_DIGITS_BY_3, _AYA), clean_spaces=False)),
    "youtu": _S((_YOUTU_CJK, _YOUTU), ignore_merges=True, clean_spaces=False),
    **dict.fromkeys(("bailingmoe", "bailingmoe2", "llada-moe"), _S((_BAILING,), clean_spaces=False)),
    "seed-coder": _S((_SEED_CODER,), clean_spaces=False),
}


def pre_tokenizer_spec(name: str) -> PreTokenizerSpec:
    """The spec for a `tokenizer.ggml.pre` value; an empty name means llama.cpp's 'default'."""
    spec = PRE_TOKENIZERS.get(name or "default")
    if spec is None:
        known = ", ".join(sorted(PRE_TOKENIZERS))
        raise UnsupportedError(f"unknown pre-tokenizer type {name!r} (tokenizer.ggml.pre); "
                               f"known: {known}")
    return spec
