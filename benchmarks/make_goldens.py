"""Write llama.cpp golden data (greedy continuations, tokenizations) for hearth's tests.

Run with the llama.cpp venv built by setup_llamacpp.sh (not hearth's venv):

    /work/llamacpp-venv/bin/python benchmarks/make_goldens.py [--models qwen2.5-coder-0.5b ...] [--models-dir DIR]

Models are read where `hearth pull NAME` puts them ($HEARTH_HOME/models/NAME/FILE, HEARTH_HOME
defaulting to ~/.cache/hearth), or from --models-dir DIR/FILE.

Writes tests/data/goldens/greedy_{model}.json and tokenize_{model}.json; with --kld, instead,
llama.cpp's KL divergence from the f32 reference that benchmarks/make_reference.py wrote
(tests/data/reference/{model}.npz), per position, on its prefill path (the whole teacher-forced
sequence in one batch) and its decode path (one token per eval): {model}_llamacpp.json beside it, the
bound the fidelity tests hold hearth's paths to. Greedy decoding is an
argmax loop over llama.cpp's raw logits, so it runs past EOS and every case has exactly
--new-tokens ids; `eog_positions` says where an end-of-generation token came out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

# Passive OpenMP waits: on shared, oversubscribed cores spinning threads stall each other for
# seconds per token. Results are unchanged (same thread count and work split); only speed is.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import llama_cpp  # noqa: E402  (after the OpenMP setting, which is read when the library loads)
import numpy as np  # noqa: E402
from llama_cpp import Llama  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "tests" / "data" / "goldens"
CORPUS = Path(__file__).resolve().parent / "tokenizer_corpus.json"
BUILD_INFO = Path(sys.prefix) / "BUILD_INFO.json"  # written by setup_llamacpp.sh

# name -> (file name, chat wrapper); the wrappers are each model's own turn markers.
MODELS = {
    "smollm2-135m": ("SmolLM2-135M-Instruct.Q4_1.gguf",
                     "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"),
    "gemma3-270m": ("gemma-3-270m-q4_k_m.gguf",
                    "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n"),
    "qwen2.5-coder-0.5b": ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                           "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"),
    "qwen2.5-coder-1.5b": ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                           "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"),
}

PLAIN_PROMPTS = [
    ("prose", "The old lighthouse keeper climbed the spiral stairs every evening, and"),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ("list", "Shopping list:\n1. Eggs\n2. Milk\n3."),
    ("question", "Question: What is the capital of France?\nAnswer:"),
    ("numbers", "1, 2, 3, 5, 8, 13, 21,"),
    ("french", "La vie est belle quand on"),
    ("chinese", "今天天气很好，我们"),
    ("json", '{"name": "Alice", "age": 30, "hobbies": ['),
    ("history", "In 1969, the first humans landed on"),
]
# A passage given twice, then the start of a third copy: both engines continue it with large top-1
# margins for 64+ tokens, so free-running greedy output can be compared token for token (ordinary
# prompts hit a near-tie within 64 tokens, where arithmetic differences may flip the argmax).
PASSAGES = [
    ("copy_prose", "The river bends twice before it reaches the old mill, where the water slows and "
     "turns green under the willows. Children from the village come here in summer to catch small "
     "fish with nets made from their mothers' curtains, and the miller pretends not to see them."),
    ("copy_code", "def merge_sorted(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
     "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n"
     "            out.append(b[j])\n            j += 1\n    return out + a[i:] + b[j:]\n"),
    ("copy_list", "Packing list for the mountain trip: two wool sweaters, a rain jacket, hiking boots, "
     "three pairs of socks, a headlamp with spare batteries, a water filter, a map of the northern "
     "trails, sunscreen, a small first aid kit, and enough trail mix for four days."),
    ("copy_json", '{"id": 4821, "name": "Maria Lopez", "email": "maria.lopez@example.com", "roles": '
     '["editor", "reviewer"], "active": true, "address": {"street": "12 Harbor Road", "city": '
     '"Portsmouth", "zip": "03801"}, "last_login": "2024-03-18T09:41:00Z"}'),
    ("copy_numbers", "Table of squares: 11 squared is 121, 12 squared is 144, 13 squared is 169, 14 squared "
     "is 196, 15 squared is 225, 16 squared is 256, 17 squared is 289, 18 squared is 324, 19 squared "
     "is 361, 20 squared is 400."),
    ("copy_french", "Le petit village se trouve au bord de la mer. Chaque matin, les pêcheurs partent avant "
     "le lever du soleil et reviennent vers midi avec des paniers pleins de sardines, que leurs "
     "femmes vendent ensuite sur la place du marché."),
    ("copy_story", "Once upon a time there was a small grey cat named Pepper who lived in a bakery. Every "
     "night she walked along the shelves, counted the loaves of bread, and slept on a warm sack of "
     "flour next to the oven until the baker arrived at dawn."),
    ("copy_html", "<ul class=\"menu\">\n  <li><a href=\"/\">Home</a></li>\n  <li><a href=\"/about\">About us</a></li>\n"
     "  <li><a href=\"/products\">Products</a></li>\n  <li><a href=\"/blog\">Blog</a></li>\n"
     "  <li><a href=\"/contact\">Contact</a></li>\n</ul>\n"),
    ("copy_recipe", "To make the pancakes, whisk two eggs with a cup of milk, add a cup of flour, a pinch of "
     "salt and a spoon of sugar, and stir until smooth. Heat a pan with a little butter, pour in a "
     "ladle of batter, and turn the pancake when bubbles appear on top."),
    ("copy_spanish", "La biblioteca de la ciudad abre todos los días a las nueve de la mañana. En la sala "
     "principal hay mesas largas de madera, lámparas verdes y ventanas altas que dan al parque, donde "
     "los estudiantes leen bajo los árboles cuando hace buen tiempo."),
    ("copy_german", "Der Zug nach Hamburg fährt jeden Morgen um sieben Uhr vom Hauptbahnhof ab. Die meisten "
     "Fahrgäste lesen Zeitung oder trinken Kaffee, während draußen die Felder, kleinen Dörfer und "
     "langsamen Flüsse des Nordens vorbeiziehen."),
    ("copy_csv", "date,city,temperature,rainfall\n2024-01-01,Oslo,-4,2.1\n2024-01-02,Oslo,-6,0.0\n"
     "2024-01-03,Oslo,-2,5.4\n2024-01-04,Oslo,1,7.8\n2024-01-05,Oslo,0,3.3\n2024-01-06,Oslo,-3,0.4\n"),
    ("copy_letter", "Dear Mr. Thompson, thank you for your letter of March the fourth. We are pleased to "
     "confirm that your order of twelve oak chairs and one large dining table has been shipped today "
     "and should arrive at your home within five working days. Kind regards, Sarah Miller."),
    ("copy_science", "Photosynthesis is the process by which green plants use sunlight, water and carbon "
     "dioxide to make glucose and oxygen. It takes place mainly in the leaves, inside small structures "
     "called chloroplasts, which contain the green pigment chlorophyll."),
    ("copy_poem", "The moon is up above the hill,\nthe wind is soft, the trees are still,\nthe owl is "
     "calling from the barn,\nthe sheep are sleeping on the farm,\nand all the world is quiet now\n"
     "from the meadow to the plough.\n"),
    ("copy_chinese", "春天来了，山上的花都开了。小明和他的朋友们每天放学以后都去河边散步，看看水里的小鱼，"
     "听听树上的鸟叫，然后一起回家吃晚饭。"),
    ("copy_weather", "The weather report for Tuesday: cloudy in the morning with light rain along the coast, "
     "clearing in the afternoon, highs near eighteen degrees, winds from the west at ten to fifteen "
     "kilometres per hour, and a cool, dry night."),
    ("copy_directions", "To reach the museum, leave the station by the north exit, walk past the fountain and "
     "the bank, turn left at the second traffic light, and follow the tram line for about five minutes "
     "until you see a red brick building with tall white columns."),
    ("copy_sql", "SELECT customers.name, orders.total\nFROM customers\nJOIN orders ON orders.customer_id = "
     "customers.id\nWHERE orders.total > 100\nORDER BY orders.total DESC\nLIMIT 10;\n"),
    ("copy_garden", "In the garden behind the house there are four apple trees, a row of tomato plants, a small "
     "pond with three goldfish, and a wooden bench where my grandmother sits every afternoon to read the "
     "newspaper and drink her tea."),
    ("copy_minutes", "Minutes of the meeting: the committee agreed to repaint the community hall in May, to buy "
     "twenty new chairs for the reading room, and to hold the summer fair on the first Saturday of July, "
     "with music, games and a cake competition."),
    ("copy_yaml", "server:\n  host: 0.0.0.0\n  port: 8080\n  workers: 4\nlogging:\n  level: info\n  file: "
     "/var/log/app.log\ndatabase:\n  url: postgres://db:5432/app\n  pool_size: 10\n"),
]


def copy_prompt(text: str) -> str:
    """Three copies, then the fourth up to a clause break (a cut mid-word is ambiguous)."""
    cut = min(i + 1 for i in (text.find(c, 20) for c in (", ", "\n", "，")) if i >= 0)
    return "\n\n".join([text] * 3 + [text[:cut].rstrip(" ")])


PLAIN_PROMPTS += [(kind, copy_prompt(text)) for kind, text in PASSAGES]

CHAT_PROMPTS = [
    ("chat_math", "What is 2+2?"),
    ("chat_haiku", "Write a haiku about the sea."),
    ("chat_colors", "List three primary colors."),
]

N_CTX = 512
N_BATCH = 512
N_THREADS = 2
TOP_LOGITS_CASES = 2  # record top-5 logits for this many cases ...
TOP_LOGITS_STEPS = 8  # ... at this many first steps


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_info() -> dict:
    info = json.loads(BUILD_INFO.read_text()) if BUILD_INFO.exists() else {}
    info.setdefault("llama_version", llama_cpp.llama_cpp.llama_version().decode())
    info.setdefault("system_info", llama_cpp.llama_print_system_info().decode().strip())
    return info


def last_logits(llm: Llama) -> np.ndarray:
    # logits: [n_vocab] of the last evaluated position (the only output row when logits_all=False)
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()


def greedy(llm: Llama, prompt_ids: list[int], n_new: int, top_steps: int) -> dict:
    """Argmax loop on raw logits; EOS does not stop it (hearth runs the same ids with ignore_eos)."""
    llm.reset()
    llm.eval(prompt_ids)  # one batch: len(prompt_ids) <= N_BATCH
    new_ids, margins, top = [], [], []
    for step in range(n_new):
        logits = last_logits(llm)
        order = np.argsort(-logits, kind="stable")[:5]
        tok = int(order[0])
        new_ids.append(tok)
        # top-1 minus top-2 logit: a tiny margin marks a step where small numeric drift may flip the argmax
        margins.append(round(float(logits[order[0]] - logits[order[1]]), 5))
        if step < top_steps:
            top.append({"ids": [int(i) for i in order], "logits": [float(logits[i]) for i in order]})
        if step + 1 < n_new:
            llm.eval([tok])
    vocab = llm._model.vocab
    eog = [i for i, t in enumerate(new_ids) if llama_cpp.llama_vocab_is_eog(vocab, t)]
    return {"new_token_ids": new_ids, "eog_positions": eog, "top1_margins": margins, "top5": top}


def greedy_cases(llm: Llama, chat_wrapper: str, n_new: int) -> list[dict]:
    prompts = [(kind, text, False) for kind, text in PLAIN_PROMPTS]
    prompts += [(kind, chat_wrapper.format(text), True) for kind, text in CHAT_PROMPTS]
    cases = []
    for i, (kind, prompt, special) in enumerate(prompts):
        ids = llm.tokenize(prompt.encode(), add_bos=True, special=special)  # BOS only if the model says so
        out = greedy(llm, ids, n_new, TOP_LOGITS_STEPS if i < TOP_LOGITS_CASES else 0)
        text = llm.detokenize(out["new_token_ids"]).decode("utf-8", errors="replace")
        shown = llm.detokenize(out["new_token_ids"], special=True).decode("utf-8", errors="replace")
        case = {"kind": kind, "prompt": prompt, "parse_special": special, "prompt_token_ids": ids,
                "new_token_ids": out["new_token_ids"], "text": text, "text_with_special": shown,
                "eog_positions": out["eog_positions"], "top1_margins": out["top1_margins"]}
        if out["top5"]:
            case["top5_first_steps"] = out["top5"]
        cases.append(case)
        print(f"  [{i + 1}/{len(prompts)}] {kind}: {text[:60]!r}", file=sys.stderr, flush=True)
    return cases


def vocab_flags(llm: Llama) -> dict:
    vocab = llm._model.vocab
    return {"add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
            "bos_id": llm.token_bos(), "eos_id": llm.token_eos()}


def write_greedy(name: str, path: Path, chat_wrapper: str, n_new: int) -> None:
    llm = Llama(str(path), n_ctx=N_CTX, n_batch=N_BATCH, n_threads=N_THREADS,
                n_threads_batch=N_THREADS, flash_attn=False, verbose=False)
    doc = {
        "llama_cpp_python_version": llama_cpp.__version__,
        "llama_cpp_commit_or_build_info": build_info(),
        "model": name, "gguf_file": path.name, "gguf_sha256": sha256(path),
        "n_ctx": N_CTX, "n_batch": N_BATCH, "n_threads": N_THREADS,
        "settings": "greedy argmax over raw logits, past EOS; prompt evaluated in one batch; "
                    "flash_attn off; f16 KV cache (llama.cpp default)",
        "vocab": vocab_flags(llm),
        "cases": greedy_cases(llm, chat_wrapper, n_new),
    }
    dump(doc, OUT_DIR / f"greedy_{name}.json")
    llm.close()


def write_tokenize(name: str, path: Path) -> None:
    llm = Llama(str(path), vocab_only=True, verbose=False)
    texts = json.loads(CORPUS.read_text())["texts"]
    cases = [{"text": t, "add_special": add, "parse_special": parse,
              "ids": llm.tokenize(t.encode(), add_bos=add, special=parse)}
             for t in texts for add in (False, True) for parse in (False, True)]
    doc = {"llama_cpp_python_version": llama_cpp.__version__, "model": name, "gguf_file": path.name,
           "vocab": vocab_flags(llm), "cases": cases}
    dump(doc, OUT_DIR / f"tokenize_{name}.json")
    llm.close()


def load_kld():
    """hearth/bench/kld.py by path: numpy only, and this venv has no hearth."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("kld", REPO / "hearth" / "bench" / "kld.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_kld(name: str, path: Path) -> None:
    """llama.cpp's KL from the reference at every reference position, prefill and decode paths."""
    kld = load_kld()
    ref = np.load(REPO / "tests" / "data" / "reference" / f"{name}.npz")
    cases = json.loads((OUT_DIR / f"greedy_{name}.json").read_text())["cases"]
    steps = ref["ids"].shape[1]
    llm = Llama(str(path), n_ctx=N_CTX, n_batch=N_BATCH, n_threads=N_THREADS, n_threads_batch=N_THREADS,
                flash_attn=False, logits_all=True, verbose=False)
    prefill, decode = [], []
    for i, case in enumerate(cases):
        prompt, new = case["prompt_token_ids"], case["new_token_ids"][:steps]
        llm.reset()
        llm.eval(prompt + new[:-1])  # one batch: rows len(prompt) - 1 .. predict new[0 ..]
        rows = np.array(llm.scores[len(prompt) - 1:len(prompt) - 1 + steps])
        prefill.append(kld.lumped_kl(ref["ids"][i], ref["logprobs"][i], kld.log_softmax(rows)).tolist())
        llm.reset()
        llm.eval(prompt)
        rows = [last_logits(llm)]
        for tok in new[:-1]:
            llm.eval([tok])
            rows.append(last_logits(llm))
        decode.append(kld.lumped_kl(ref["ids"][i], ref["logprobs"][i], kld.log_softmax(np.stack(rows))).tolist())
        print(f"  [{i + 1}/{len(cases)}] prefill {np.mean(prefill[-1]):.4f} decode {np.mean(decode[-1]):.4f}",
              file=sys.stderr, flush=True)
    llm.close()
    doc = {"llama_cpp_python_version": llama_cpp.__version__, "llama_cpp_commit_or_build_info": build_info(),
           "model": name, "gguf_sha256": sha256(path), "reference_gguf_sha256": str(ref["gguf_sha256"]),
           "statistic": "KL(reference || llama.cpp) in nats over the reference's top-K tokens plus the rest "
                        "(hearth/bench/kld.py), per case and step",
           "mean": {"prefill": float(np.mean(prefill)), "decode": float(np.mean(decode))},
           "prefill": prefill, "decode": decode}
    out = REPO / "tests" / "data" / "reference" / f"{name}_llamacpp.json"
    out.write_text(json.dumps(doc, indent=None) + "\n")
    print(f"wrote {out.relative_to(REPO)}: mean prefill {doc['mean']['prefill']:.5f}, "
          f"decode {doc['mean']['decode']:.5f}", file=sys.stderr)


def dump(doc: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {path.relative_to(REPO)} ({len(doc['cases'])} cases)", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=None,
                    help="a folder holding the .gguf files (default: each catalog model's folder in $HEARTH_HOME)")
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--kld", action="store_true",
                    help="record llama.cpp's KL divergence from the reference (make_reference.py) instead")
    args = ap.parse_args()
    for name in args.models:
        file_name, chat_wrapper = MODELS[name]
        home = Path(os.environ.get("HEARTH_HOME", Path.home() / ".cache" / "hearth"))
        path = (args.models_dir or home / "models" / name) / file_name
        print(f"{name}: {path}", file=sys.stderr)
        if args.kld:
            write_kld(name, path)
            continue
        write_tokenize(name, path)
        write_greedy(name, path, chat_wrapper, args.new_tokens)


if __name__ == "__main__":
    main()
