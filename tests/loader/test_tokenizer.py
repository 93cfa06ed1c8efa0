"""Tokenizer built from GGUF metadata.

References: llama.cpp goldens (ids from llama-cpp-python, tests/data/goldens/tokenize_*.json) on the
two real models; on tiny synthetic vocabularies, slow line-by-line transcriptions of llama.cpp's SPM
and BPE loops (llm_tokenizer_spm_session / llm_tokenizer_bpe_session) and of llama_detokenize's
clean-up passes."""

from __future__ import annotations

import codecs
import heapq
import json
import random
import re
from pathlib import Path

import gguf
import pytest
from tokenizers import Regex, pre_tokenizers

from hearth.errors import UnsupportedError
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.pretokenizers import PRE_TOKENIZERS
from hearth.loader.spm_merges import spm_merges
from hearth.loader.tokenizer import Tokenizer, TokenIdError, _clean_spaces
from hearth.loader.vocab import read_vocab


GOLDENS = Path(__file__).resolve().parents[1] / "data" / "goldens"
REAL = {"smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
        "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"}
# llama.cpp's end-of-generation sets (llama_vocab_is_eog in llama-cpp-python 0.3.36) for these files
EOG = {"smollm2-135m": {"<|endoftext|>", "<|im_end|>", "<reponame>"},
       "gemma3-270m": {"<eos>", "<end_of_turn>", "</s>"},
       **dict.fromkeys(["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"],
                       {"<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "</s>"})}


@pytest.fixture(scope="module", params=list(REAL))
def real(request, model_path) -> tuple[str, Tokenizer, dict]:
    name = request.param
    golden = json.loads((GOLDENS / f"tokenize_{name}.json").read_text())  # missing golden = failure
    path = model_path(name)  # the catalog model, downloaded once into HEARTH_HOME
    assert path.name == REAL[name]
    return name, Tokenizer.from_gguf(GGUFFile(path)), golden


def test_ids_match_llama_cpp_goldens(real):
    name, tok, golden = real
    assert golden["gguf_file"] == REAL[name]
    v = golden["vocab"]
    assert (tok.add_bos, tok.add_eos) == (v["add_bos"], v["add_eos"])
    assert (tok.bos_id, tok.eos_id) == (v["bos_id"], v["eos_id"])
    bad = [(c["text"], c["add_special"], c["parse_special"], c["ids"], got)
           for c in golden["cases"]
           if (got := tok.encode(c["text"], c["add_special"], c["parse_special"])) != c["ids"]]
    assert not bad, f"{len(bad)}/{len(golden['cases'])} differ from llama.cpp, first: {bad[0]}"


def test_decode_inverts_encode(real):
    _, tok, golden = real
    for text in {c["text"] for c in golden["cases"]}:
        assert tok.decode(tok.encode(text, False, False)) == text
        # the BOS the model adds is dropped again when special tokens are skipped
        assert tok.decode(tok.encode(text, True, False), skip_special_tokens=True) == text


def test_token_bytes_stream_utf8_safely(real):
    _, tok, golden = real
    split_chars = 0
    rare = "rare: \U0010fffd \U00013000 \U0001f600"  # byte fallback (gemma) / partial byte tokens (BPE)
    for text in {c["text"] for c in golden["cases"]} | {rare}:
        ids = tok.encode(text, False, False)
        pieces = [tok.token_to_bytes(i) for i in ids]
        assert b"".join(pieces) == text.encode()
        split_chars += sum(not _is_utf8(p) for p in pieces)
        decoder = codecs.getincrementaldecoder("utf-8")()
        assert "".join(decoder.decode(p) for p in pieces) + decoder.decode(b"", final=True) == text
    assert split_chars > 0  # some tokens carry only part of a character (byte fallback / byte-level)


def test_eog_and_special_tokens(real):
    name, tok, _ = real
    assert {tok.id_to_piece(i) for i in tok.eog_ids} == EOG[name]
    assert (tok.chat_template is None) == (name == "gemma3-270m")  # gemma's file has no template
    assert tok.eos_id in tok.eog_ids
    bos = tok.bos_token
    assert tok.encode(bos, False, True) == [tok.bos_id]
    assert tok.bos_id not in tok.encode(bos, False, False)  # control text is plain text unless parsed
    assert tok.decode([tok.bos_id]) == bos and tok.decode([tok.bos_id], skip_special_tokens=True) == ""
    with pytest.raises(TokenIdError):
        tok.decode([tok.vocab_size])


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


# ---- synthetic vocabularies --------------------------------------------------------------------

def write_vocab_gguf(path: Path, model: str, tokens: list[str], types: list[int], *, pre: str | None = None,
                     scores: list[float] | None = None, merges: list[str] | None = None,
                     **flags) -> GGUFFile:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    for key, value in flags.items():  # e.g. bos_token_id=1 -> add_bos_token_id(1)
        getattr(w, f"add_{key}")(value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return GGUFFile(path)


T = gguf.TokenType
N, UNK, CTRL, USER, BYTE = (int(t) for t in (T.NORMAL, T.UNKNOWN, T.CONTROL, T.USER_DEFINED, T.BYTE))
SPM_SPECIALS = [("<unk>", UNK), ("<s>", CTRL), ("</s>", CTRL), ("<start_of_turn>", CTRL), ("<tool>", USER)]


def spm_vocab(seed: int = 0):
    """Specials, 256 byte tokens, single chars and ~300 random multi-char pieces with distinct scores."""
    rng = random.Random(seed)
    chars = list("\u2581abcde")
    pieces = set()
    while len(pieces) < 300:
        pieces.add("".join(rng.choice(chars) for _ in range(rng.randint(2, 6))))
    normal = chars + sorted(pieces)
    tokens = [t for t, _ in SPM_SPECIALS] + [f"<0x{b:02X}>" for b in range(256)] + normal
    types = [ty for _, ty in SPM_SPECIALS] + [BYTE] * 256 + [N] * len(normal)
    order = list(range(len(normal)))
    rng.shuffle(order)
    scores = [0.0] * (len(SPM_SPECIALS) + 256) + [-float(k) for k in order]
    return tokens, types, scores


def spm_reference(text: str, tokens: list[str], scores: list[float]) -> list[int]:
    """llm_tokenizer_spm_session::tokenize, line by line: merge the best-scoring adjacent pair whose
    concatenation is a token (leftmost on ties); leftovers become <0xXX> byte tokens."""
    vocab = {t: i for i, t in enumerate(tokens)}
    sym = list(text)
    nxt = list(range(1, len(sym))) + [-1]
    prv = list(range(-1, len(sym) - 1))
    heap: list = []

    def try_add(left: int, right: int) -> None:
        if left >= 0 and right >= 0 and (sym[left] + sym[right]) in vocab:
            merged = sym[left] + sym[right]
            heapq.heappush(heap, (-scores[vocab[merged]], left, right, len(merged)))

    for i in range(1, len(sym)):
        try_add(i - 1, i)
    while heap:
        _, left, right, size = heapq.heappop(heap)
        if not sym[left] or not sym[right] or len(sym[left]) + len(sym[right]) != size:
            continue
        sym[left], sym[right] = sym[left] + sym[right], ""
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prv[nxt[right]] = left
        try_add(prv[left], left)
        try_add(left, nxt[left])
    out = []
    i = 0 if sym else -1
    while i != -1:
        s = sym[i]
        out += [vocab[s]] if s in vocab else [vocab[f"<0x{b:02X}>"] for b in s.encode()]
        i = nxt[i]
    return out


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    tokens, types, scores = spm_vocab()
    path = tmp_path_factory.mktemp("spm") / "spm.gguf"
    g = write_vocab_gguf(path, "llama", tokens, types, scores=scores, bos_token_id=1, eos_token_id=2,
                         unk_token_id=0, add_bos_token=True, add_eos_token=True, add_space_prefix=True)
    return Tokenizer.from_gguf(g), tokens, scores


def test_spm_matches_reference_loop(spm):
    tok, tokens, scores = spm
    rng = random.Random(1)
    alphabet = "abcde  \u00e9x\U0001f600"  # é, x and the emoji are not tokens: byte fallback
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        expected = spm_reference(("\u2581" + text).replace(" ", "\u2581"), tokens, scores)
        assert tok.encode(text, add_special_tokens=False) == expected, text
        assert tok.decode(expected) == text  # the space prefix is removed again
        # llama_detokenize keeps that space when it drops a BOS (remove_special); so do we
        assert tok.decode(tok.encode(text), skip_special_tokens=True) == " " + text


def test_spm_special_tokens_and_space_prefix(spm):
    tok, tokens, scores = spm
    sot, tool, bos, eos = (tokens.index(t) for t in ("<start_of_turn>", "<tool>", "<s>", "</s>"))
    ref = lambda s: spm_reference(s.replace(" ", "\u2581"), tokens, scores)  # noqa: E731
    text = "ab<start_of_turn>cd e<tool>a"
    # like llama.cpp, every text fragment after a special token gets the space prefix again
    assert tok.encode(text) == [bos] + ref(" ab") + [sot] + ref(" cd e") + [tool] + ref(" a") + [eos]
    # control tokens are plain text without parse_special; user-defined ones are always matched
    assert tok.encode(text, parse_special=False) == (
        [bos] + ref(" ab<start_of_turn>cd e") + [tool] + ref(" a") + [eos])
    assert tok.decode(tok.encode(text), skip_special_tokens=True) == " ab cd e<tool> a"
    assert tok.eog_ids == {eos}


GPT2_ASCII = r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+"
LLAMA3_ASCII = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\nA-Za-z0-9]?[A-Za-z]+"
                r"|[0-9]{1,3}| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# pre type -> (its regexes restricted to ASCII text, ignore_merges)
BPE_PRES = {"gpt-2": ([GPT2_ASCII], False), "smollm": ([r"[0-9]", GPT2_ASCII], False),
            "llama-bpe": ([LLAMA3_ASCII], True)}


def gpt2_chars() -> list[str]:
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    extra = iter(range(0x100, 0x200))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def bpe_vocab(seed: int = 0):
    """256 byte chars + merges learned greedily from random pairs + three special tokens."""
    rng = random.Random(seed)
    byte_char = gpt2_chars()
    tokens = list(byte_char)
    seeds = [byte_char[ord(c)] for c in " abcdeAB1'\n"]
    merges = []
    while len(merges) < 200:
        a, b = rng.choice(seeds + tokens[256:]), rng.choice(seeds + tokens[256:])
        if a + b not in tokens:
            tokens.append(a + b)
            merges.append(f"{a} {b}")
    types = [N] * len(tokens) + [CTRL, CTRL, USER]
    return tokens + ["<|im_start|>", "<|im_end|>", "<think>"], types, merges, byte_char


def bpe_reference(text: str, regexes: list[str], ignore_merges: bool, tokens, merges, byte_char) -> list[int]:
    """llm_tokenizer_bpe_session::tokenize: regex splits, then lowest-rank adjacent merge first."""
    vocab = {t: i for i, t in enumerate(tokens)}
    ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
    words = [text]
    for rx in regexes:
        words = [p for w in words for p in _isolated_split(rx, w)]
    out = []
    for word in words:
        sym = [byte_char[b] for b in word.encode()]
        if ignore_merges and "".join(sym) in vocab:
            sym = ["".join(sym)]
        while True:
            pairs = [(ranks[p], i) for i, p in enumerate(zip(sym, sym[1:])) if p in ranks]
            if not pairs:
                break
            _, i = min(pairs)
            sym[i:i + 2] = [sym[i] + sym[i + 1]]
        out += [vocab[s] for s in sym]
    return out


def _isolated_split(rx: str, text: str) -> list[str]:
    """Matches and the text between them, in order (llama.cpp's unicode_regex_split_stl)."""
    out, pos = [], 0
    for m in re.finditer(rx, text):
        out += [text[pos:m.start()]] if m.start() > pos else []
        out.append(m.group())
        pos = m.end()
    return out + ([text[pos:]] if pos < len(text) else [])


@pytest.mark.parametrize("pre", list(BPE_PRES))
def test_bpe_matches_reference_loop(pre, tmp_path):
    tokens, types, merges, byte_char = bpe_vocab()
    g = write_vocab_gguf(tmp_path / "bpe.gguf", "gpt2", tokens, types, pre=pre, merges=merges,
                         bos_token_id=len(tokens) - 3, eos_token_id=len(tokens) - 2)
    tok = Tokenizer.from_gguf(g)
    regexes, ignore = BPE_PRES[pre]
    assert tok.add_bos == (pre == "llama-bpe")  # llama.cpp's per-type default
    rng = random.Random(2)
    alphabet = list("abcdeAB1'\n\t.,?") + [" ", " ", "'s", "'ll", "123", "<|im_end|>", "<think>", "é"]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20)))
        parts = re.split(r"(<\|im_end\|>|<think>)", text)  # special tokens are split out first
        expected = [x for p in parts if p for x in (
            [tokens.index(p)] if p in ("<|im_end|>", "<think>") else
            bpe_reference(p, regexes, ignore, tokens, merges, byte_char))]
        assert tok.encode(text, add_special_tokens=False) == expected, text
        clean = PRE_TOKENIZERS[pre].clean_spaces  # gpt-2 and llama3 tidy " ," and " 's" on decode
        assert tok.decode(expected) == (_clean_reference(text.encode()).decode() if clean else text)


def _clean_reference(text: bytes) -> bytes:
    """llama_detokenize's three clean_spaces passes, transcribed loop for loop."""
    t = bytearray(text)
    out = t[:1]
    for i in range(1, len(t)):  # " ?" " !" " ." " ,"
        if t[i - 1] == 32 and t[i] in b"?!.,":
            out.pop()
        out.append(t[i])
    t, out, i = out, out[:1], 1
    while i < len(t):  # " ' " -> "'"
        if t[i] == 39 and i + 1 < len(t) and t[i - 1] == 32 and t[i + 1] == 32:
            out.pop()
            out.append(39)
            t[i + 1] = 0
            i += 2
            continue
        out.append(t[i])
        i += 1
    t, out = out, out[:1]
    for i in range(1, len(t)):  # " 's" " 'm" " 're" " 've"
        if t[i - 1] == 32 and t[i] == 39 and i + 1 < len(t) and (
                t[i + 1] in b"sm" or (i + 2 < len(t) and bytes(t[i + 1:i + 3]) in (b"re", b"ve"))):
            out.pop()
        out.append(t[i])
    return bytes(out)


def test_clean_spaces_matches_llama_detokenize():
    rng = random.Random(3)
    for _ in range(2000):
        text = "".join(rng.choice(["a", " ", "'", "s", "m", "re", "ve", "t", "?", ".", ",", "!"])
                       for _ in range(rng.randint(0, 12))).encode()
        assert _clean_spaces(text) == _clean_reference(text), text


def test_every_pre_tokenizer_regex_compiles():
    sample = "Hello, World! It's 2024: naïve café ~ 中文 123456 \n\n  x"
    for name, spec in PRE_TOKENIZERS.items():
        pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r), "isolated") for r in spec.regexes])
        pieces = "".join(p for p, _ in pre.pre_tokenize_str(sample))
        assert pieces == sample, name


def test_unknown_pre_and_model_are_clear_errors(tmp_path):
    tokens, types, merges, _ = bpe_vocab()
    g = write_vocab_gguf(tmp_path / "a.gguf", "gpt2", tokens, types, pre="no-such-pre", merges=merges)
    with pytest.raises(UnsupportedError, match=r"'no-such-pre'.*known:.*llama-bpe.*smollm"):
        Tokenizer.from_gguf(g)
    g = write_vocab_gguf(tmp_path / "b.gguf", "ugm", tokens, types)
    with pytest.raises(UnsupportedError, match=r"'ugm'.*supported: bert, gemma4, gpt2, llama"):
        Tokenizer.from_gguf(g)


def test_spm_merge_table_has_every_split(tmp_path):
    # the vectorized hash search must find exactly the (left, right) splits a nested loop finds
    tokens, types, scores = spm_vocab(seed=5)
    vocab = {t: i for i, t in enumerate(tokens)}
    expected = {(t[:k], t[k:]) for t in tokens for k in range(1, len(t)) if t[:k] in vocab and t[k:] in vocab}
    got = spm_merges(read_vocab(write_vocab_gguf(tmp_path / "m.gguf", "llama", tokens, types, scores=scores)))
    assert set(got) == expected and len(got) == len(expected)
    merged_scores = [scores[vocab[a + b]] for a, b in got]
    assert merged_scores == sorted(merged_scores, reverse=True)  # best score = first rank


def test_a_lone_surrogate_is_a_clear_error(spm):
    """A JSON body may spell "\\ud800": the backend's bare TypeError was a 500 on the server."""
    from hearth.errors import HearthError

    tok = spm[0]
    with pytest.raises(HearthError, match=r"lone UTF-16 surrogate \(\\ud800, near 'ab'\)"):
        tok.encode("ab\ud800cd")
    assert tok.decode(tok.encode("ab\U0001f600", add_special_tokens=False)) == "ab\U0001f600"  # a non-BMP character is fine


HARMONY_MARKERS = ["<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|return|>", "<|call|>"]


def test_harmony_markers_print_and_only_return_and_call_end_generation(tmp_path):
    """gpt-oss's GGUF marks every harmony marker CONTROL; llama.cpp's fix-ups (hearth.loader.vocab) make
    <|return|> and <|call|> the ends of generation and print the others even when special tokens are
    skipped (as the server detokenizes), so the output parser (hearth.tool_parsers.harmony) sees the
    channels, and a call stops the answer."""
    tokens, types, merges, _ = bpe_vocab()
    tokens, types = tokens[:-3] + HARMONY_MARKERS, types[:-3] + [CTRL] * len(HARMONY_MARKERS)
    g = write_vocab_gguf(tmp_path / "harmony.gguf", "gpt2", tokens, types, pre="gpt-2", merges=merges,
                         eos_token_id=tokens.index("<|return|>"))
    tok = Tokenizer.from_gguf(g)
    ids = {t: tokens.index(t) for t in HARMONY_MARKERS}
    assert tok.eog_ids == {ids["<|return|>"], ids["<|call|>"]}
    text = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"
    out = tok.decode(tok.encode(text, add_special_tokens=False), skip_special_tokens=True)
    assert out == text.removesuffix("<|call|>")
    assert tok.decode([ids["<|end|>"], ids["<|start|>"]], skip_special_tokens=True) == "<|end|><|start|>"


GEMMA4_MARKERS = ["<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<|tool_response>"]


def test_gemma4_markers_print_even_where_a_file_marks_them_control(tmp_path):
    """Gemma 4's converter writes its thought and call markers USER_DEFINED; files that retype them
    CONTROL would hide them from the output parser (hearth.tool_parsers.gemma4) when special tokens are
    skipped. They print either way; <|tool_response> stays an end of generation."""
    tokens, types, merges, _ = bpe_vocab()
    tokens, types = tokens[:-len(GEMMA4_MARKERS)] + GEMMA4_MARKERS, types[:-len(GEMMA4_MARKERS)] + [CTRL] * 6
    g = write_vocab_gguf(tmp_path / "gemma4.gguf", "gpt2", tokens, types, pre="gpt-2", merges=merges)
    tok = Tokenizer.from_gguf(g)
    text = '<|channel>thought\nx<channel|><|tool_call>call:f{a:<|"|>b<|"|>}<tool_call|>'
    assert tok.decode(tok.encode(text, add_special_tokens=False), skip_special_tokens=True) == text
    assert tokens.index("<|tool_response>") in tok.eog_ids
