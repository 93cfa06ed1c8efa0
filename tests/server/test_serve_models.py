"""What `hearth serve` makes of its MODEL arguments and --models file, before any model loads:
friendly ids (never a path) with the old forms as aliases, per-entry settings, the planner's
footprints and budget, and one CLI line naming the entry and field of a bad models file."""

from __future__ import annotations

import pytest

from hearth.api.errors import APIError
from hearth.cli import command_parser
from hearth.commands.models_file import ModelEntry, read_models_file
from hearth.commands.serve_models import build_pool, file_names, model_names, unique_names
from hearth.errors import HearthError
from tests.gguf_factory import SPECULATES, write_tiny_gguf
from tests.test_bad_input import assert_one_line_error, run_cli


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny-llama-q8.gguf"
    write_tiny_gguf(path, "llama")
    return path


def serve_args(*argv: str):
    return command_parser("serve").parse_intermixed_args(list(argv))


def test_model_ids_are_never_paths(tmp_path):
    """/v1/models lists the id and the aliases given; MODEL as given and the file's names are still taken."""
    path = tmp_path / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    entry = ModelEntry(str(path))
    assert model_names(entry, path) == ["qwen2.5-coder-1.5b-instruct-q4_k_m"]
    assert file_names(entry, path, model_names(entry, path)) == [str(path), path.name]
    catalog = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert model_names(ModelEntry("smollm2-135m"), catalog) == ["smollm2-135m"]
    assert file_names(ModelEntry("smollm2-135m"), catalog, ["smollm2-135m"]) == [catalog.stem, catalog.name]
    named = ModelEntry(str(path), name="coder", aliases=("gpt-4o",))
    assert model_names(named, path) == ["coder", "gpt-4o"]
    assert file_names(named, path, ["coder", "gpt-4o"]) == [str(path), path.stem, path.name]



def test_a_split_models_id_is_its_name_without_the_part_number(tmp_path):
    """It was `Qwen-7B-Q4_K_M-00001-of-00003` in /v1/models and /api/tags; that name is still taken."""
    first = tmp_path / "Qwen-7B-Q4_K_M-00001-of-00003.gguf"
    names = model_names(ModelEntry(str(first)), first)
    assert names == ["Qwen-7B-Q4_K_M"]
    assert file_names(ModelEntry(str(first)), first, names) == [str(first), first.stem, first.name]


def test_ids_and_given_aliases_must_be_unique(tmp_path):
    path = tmp_path / "same.gguf"
    a, b = ModelEntry(str(path), name="a"), ModelEntry(str(path), name="b")
    unique_names([model_names(a, path), model_names(b, path)], [a, b])  # the same file twice: no error
    c = ModelEntry(str(path), name="a", where="models.toml: models[2] ('a')")
    with pytest.raises(HearthError, match=r"models\[2\] \('a'\): name 'a' is already"):
        unique_names([model_names(a, path), model_names(c, path)], [a, c])
    d = ModelEntry(str(path), name="d", aliases=("b",), where="models.toml: models[3] ('d')")
    with pytest.raises(HearthError, match=r"models\[3\] \('d'\): name 'b' is already"):
        unique_names([model_names(b, path), model_names(d, path)], [b, d])


def test_two_model_files_of_one_name_are_one_line_naming_both(capsys, tiny, tmp_path):
    other = tmp_path / "b" / tiny.name
    other.parent.mkdir()
    write_tiny_gguf(other, "llama")
    assert_one_line_error(*run_cli(capsys, "serve", str(tiny), str(other)),
                          f"MODEL {str(other)!r}: name 'tiny-llama-q8' is already that of MODEL {str(tiny)!r}; "
                          "give each model its own name (a --models file's `name`)")


def test_one_model_is_pinned_with_no_budget(tiny):
    pool = build_pool(serve_args(str(tiny)))
    (spec,) = [s.spec for s in pool.slots]
    assert spec.names == ["tiny-llama-q8"] and spec.file_names == [str(tiny), tiny.name]
    assert spec.pinned and pool.max_memory == 0
    assert spec.footprint > tiny.stat().st_size // 2 and spec.max_model_len > 0
    named = build_pool(serve_args(str(tiny), "--served-model-name", "t", "--served-model-name", "t2")).slots[0].spec
    assert (named.names, named.file_names) == (["t", "t2"], [str(tiny), "tiny-llama-q8", tiny.name])


def test_a_spec_knows_whether_its_server_has_a_disk_tier(tiny, tmp_path):
    """--kv-disk-dir is the server's flag: /slots/save and /slots/restore without it are a 400 before the load."""
    assert build_pool(serve_args(str(tiny))).slots[0].spec.kv_disk is False
    assert build_pool(serve_args(str(tiny), "--kv-disk-dir", str(tmp_path))).slots[0].spec.kv_disk is True


def test_a_model_with_recurrent_layers_has_no_disk_tier_before_its_load(tiny, tmp_path):
    """qwen35's Gated DeltaNet layers (its header's config) run without the server's disk tier (hearth.llm_recurrent):
    what the pool knows before the load says so, and a llama beside it keeps the tier."""
    from tests.hybrid_models import write

    pool = build_pool(serve_args(str(tiny), str(write("qwen35", tmp_path)), "--kv-disk-dir", str(tmp_path / "kv")))
    assert [s.spec.facts.recurrent for s in pool.slots] == [False, True]
    assert [pool.known(s.spec.name).kv_disk for s in pool.slots] == [True, False]


@pytest.mark.parametrize("arch,kv,blocks,gb", [
    ("llama", "auto", 0, 2.0), ("llama", "q8_0", 0, 2.0), ("llama", "kvarn_k4v2", 0, 2.0),
    ("llama", "auto", 0, 0.0002), ("llama", "q8_0", 0, 0.0001),  # the memory bound caps the blocks and the context
    ("llama", "auto", 40, 2.0), ("llama", "q8_0", 40, 2.0), ("llama", "kvarn_k4v2", 40, 2.0),
    ("llama", "auto", 10, 2.0), ("llama", "q8_0", 10, 2.0),  # too few blocks for 512 tokens: the context lowered
    ("gemma3", "auto", 0, 2.0), ("gemma3", "auto", 20, 2.0),  # sliding-window layers hold whole blocks too
])
def test_the_footprint_holds_the_kv_cache_the_engine_allocates(tmp_path, arch, kv, blocks, gb):
    """The planner's footprint (the "loading NAME (X GiB with its KV cache)" line, /v1/models and
    --max-memory) is the engine's own KV allocation and context, byte for byte: it ignored
    --num-kv-blocks (4 full-length sequences counted whatever was forced), the staging reserve
    blocks of a quantized format, and the blocks sliding-window layers hold (it counted their window only)."""
    from hearth.llm import LLM

    path = tmp_path / "m.gguf"  # llama with head_dim 32: q8_0's blocks fit
    dims = dict(hidden=128, heads=4, kv_heads=2, head_dim=32) if arch == "llama" else dict(sliding_window=64)
    write_tiny_gguf(path, arch, context=2048, **dims)
    flags = ["--max-model-len", "512", "--max-num-seqs", "4", "--kv-cache-dtype", kv, "--num-kv-blocks", str(blocks),
             "--kv-cache-memory-gb", str(gb)]
    spec, = [s.spec for s in build_pool(serve_args(str(path), *flags)).slots]
    llm = LLM(str(path), max_model_len=512, max_num_seqs=4, kv_cache_dtype=kv, num_kv_blocks=blocks,
              kv_cache_memory_gb=gb, progress=False)
    fp = _footprint(path, kv, blocks, gb)
    assert (fp.kv, fp.context) == (llm.runner.kv_bytes, llm.max_model_len)
    assert (spec.footprint, spec.max_model_len, spec.kv_bytes) == (fp.total, llm.max_model_len, fp.kv)


def _footprint(path, kv: str, blocks: int, gb: float):
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.memory.serving import served_footprint

    return served_footprint(GGUFFile(path), 512, kv, 4, gb, 2048, blocks)


@pytest.mark.usefixtures("native_speculation")
@pytest.mark.parametrize("kv,blocks,gb,same", [
    ("auto", 0, 2.0, False), ("q8_0", 0, 2.0, False), ("auto", 40, 2.0, False), ("q8_0", 10, 2.0, False),
    ("auto", 0, 0.0002, False), ("q8_0", 0, 0.0002, False),  # the bound holds fewer blocks: the context is lowered
    ("auto", 0, 0.0002, True),  # a model drafting for itself
])
def test_the_footprint_holds_the_draft_model_the_engine_loads(tmp_path, kv, blocks, gb, same):
    """With -md the engine holds the draft's weights and adds the draft's f16 K/V to every block (so the
    memory bound holds fewer blocks and a shorter context): the footprint (the load line, /v1/models'
    memory_bytes, --max-memory) left both out (0.5B drafting for itself, --ctx 4096,
    --kv-cache-memory-gb 0.05: the engine ran 2,176 tokens, the footprint said 4,096)."""
    from hearth.llm import LLM
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.memory.serving import served_footprint

    path, draft = tmp_path / "m.gguf", tmp_path / "d.gguf"  # Q8_0: the native kernels, so speculation runs
    write_tiny_gguf(path, "qwen2", qtype="Q8_0", context=2048, hidden=128, heads=4, kv_heads=2, head_dim=32)
    write_tiny_gguf(draft, "qwen2", qtype="Q8_0", layers=1, seed=1)  # the same vocabulary, another shape
    draft = path if same else draft
    flags = ["--max-model-len", "512", "--max-num-seqs", "4", "--kv-cache-dtype", kv, "--num-kv-blocks", str(blocks),
             "--kv-cache-memory-gb", str(gb), "-md", str(draft)]
    spec, = [s.spec for s in build_pool(serve_args(str(path), *flags)).slots]
    llm = LLM(str(path), max_model_len=512, max_num_seqs=4, kv_cache_dtype=kv, num_kv_blocks=blocks,
              kv_cache_memory_gb=gb, progress=False, speculative_config={"method": "draft", "model": str(draft)})
    if llm.speculation_off:  # a quantized cache on the avx2 tier
        pytest.skip(llm.speculation_off)
    assert llm.runner.drafter is not None
    assert spec.max_model_len == llm.max_model_len
    drafts = sum(t.numel() * t.element_size() for t in llm.runner.drafter.kv_caches)
    fp = served_footprint(GGUFFile(path), 512, kv, 4, gb, 2048, blocks, GGUFFile(draft))
    assert (fp.kv, fp.context) == (llm.runner.kv_bytes + drafts, llm.max_model_len)
    assert spec.footprint == fp.total
    alone, its = _footprint(path, kv, blocks, gb), served_footprint(GGUFFile(draft))  # its weights: any settings
    # its weights on top, unless it is the model itself (the same mapped pages, on the native kernels' layout)
    assert fp.weights == alone.weights + (0 if same else its.weights)


def test_several_models_and_a_models_file(tiny, tmp_path):
    other = tmp_path / "other.gguf"
    write_tiny_gguf(other, "qwen2")
    (tmp_path / "models.toml").write_text(
        '[[models]]\nname = "small"\nmodel = "other.gguf"\ncontext = 64\npinned = true\naliases = ["gpt-4o-mini"]\n'
        '[[models]]\nname = "big"\nmodel = "tiny-llama-q8.gguf"\nkv_cache_dtype = "bf16"\nthreads = 1\n')
    pool = build_pool(serve_args(str(tiny), "--models", str(tmp_path / "models.toml"), "--max-memory", "1.5"))
    got = [(s.spec.names, s.spec.pinned, s.spec.max_model_len) for s in pool.slots]
    assert got[0][:2] == (["tiny-llama-q8"], False) and got[2][:2] == (["big"], False)
    assert got[1] == (["small", "gpt-4o-mini"], True, 64) and pool.slots[1].spec.file_names == [str(other), "other",
                                                                                                 "other.gguf"]
    assert pool.resolve("other.gguf").spec.name == "small" and pool.resolve("tiny-llama-q8").spec.name == "tiny-llama-q8"
    # its file is `big`'s too: its path and file name answer with a 400 naming both, never a guess
    for name in (str(tiny), "tiny-llama-q8.gguf"):
        with pytest.raises(APIError) as e:
            pool.resolve(name)
        assert (e.value.status, e.value.code, e.value.param) == (400, "model_ambiguous", "model")
        assert f"model {name!r} is ambiguous: it names the file of 2 models this server serves ('tiny-llama-q8', " \
               "'big'); give one of those ids" == e.value.message
    assert [c["id"] for c in pool.cards()] == ["tiny-llama-q8", "small", "gpt-4o-mini", "big"]
    assert pool.max_memory == int(1.5 * 2**30)
    entry, _, _ = pool.loader.by_id["big"]
    assert entry.kv_cache_dtype == "bf16" and entry.threads == 1


def test_several_models_default_to_the_planners_usable_memory(tiny, tmp_path):
    from hearth.memory.serving import default_budget

    other = tmp_path / "other.gguf"
    write_tiny_gguf(other, "qwen2")
    pool = build_pool(serve_args(str(tiny), str(other)))
    assert pool.max_memory == default_budget() > 0 and not any(s.spec.pinned for s in pool.slots)


@pytest.mark.parametrize("text,needles", [
    ('[[models]]\nname = "coder"\nmodel = "x.gguf"\ncontext = "long"\n',
     ["models.toml: models[1] ('coder'): context: must be a whole number", "'long'"]),
    ('[[models]]\nmodel = "smollm2-135m"\n[[models]]\nname = "b"\n',
     ["models.toml: models[2] ('b'): model: is required"]),
    ('[[models]]\nmodel = "smollm2-135m"\npinned = "yes"\n', ["models[1]: pinned: must be true or false"]),
    ('[[models]]\nmodel = "smollm2-135m"\nkeep_alive = "soon"\n', ["models[1]: keep_alive: must be a duration", "'soon'"]),
    ('[[models]]\nmodel = "smollm2-135m"\ngpu = 1\n', ["models[1]: unknown field 'gpu'", "kv_cache_dtype"]),
    ('[[models]]\nmodel = "smollm2-135m"\nkv_cache_dtype = "fp3"\n', ["models[1]: kv_cache_dtype:", "'fp3'"]),
    ('[[models]]\nname = "n"\nmodel = "no-such-model"\n', ["models[1] ('n'): model: unknown model 'no-such-model'"]),
    ('[[models]]\nname = "a"\nmodel = "tiny.gguf"\n[[models]]\nname = "a"\nmodel = "tiny.gguf"\n',
     ["models[2] ('a'): name 'a' is already"]),
    ('[models]\nmodel = "x"\n', ["models.toml: [models] is one table: write each model as an [[models]] entry "
                                "(double brackets)"]),
    ('[models.coder]\nmodel = "x"\n', ["models.toml: [models.coder] is one table: write each model as an [[models]] "
                                      "entry (double brackets) with its `name`"]),
    ('models = []\n', ["models.toml: no models: add [[models]] entries"]),
    ('[[models]\n', ["not valid TOML"]),
    ('model = "x"\n', ["unknown table or key 'model'"]),
])
def test_a_bad_models_file_is_one_line_naming_the_entry_and_field(capsys, tmp_path, text, needles):
    write_tiny_gguf(tmp_path / "tiny.gguf", "llama")
    path = tmp_path / "models.toml"
    path.write_text(text)
    code, err = run_cli(capsys, "serve", "--models", str(path))
    assert_one_line_error(code, err, *needles)


def test_served_model_name_with_several_models_is_one_line(capsys, tiny):
    code, err = run_cli(capsys, "serve", str(tiny), str(tiny), "--served-model-name", "x")
    assert_one_line_error(code, err, "--served-model-name names one model")


def test_pinned_models_beyond_the_budget_are_one_line(capsys, tiny, tmp_path):
    path = tmp_path / "models.toml"
    path.write_text(f'[[models]]\nname = "a"\nmodel = "{tiny.name}"\npinned = true\n')
    code, err = run_cli(capsys, "serve", "--models", str(path), "--max-memory", "0.0001")
    assert_one_line_error(code, err, "pinned models (a) need", "more than --max-memory")


def test_a_model_beyond_the_budget_is_said_at_the_start(capsys, tiny, tmp_path):
    """`hearth serve --models m.toml --max-memory 1.0` with a model of 1.05 GiB started without a word,
    then every request to that model got 503 model_too_large (a new user's trial). One line at the start
    says so; the server still starts for the others."""
    other = tmp_path / "other.gguf"
    write_tiny_gguf(other, "qwen2")
    pool = build_pool(serve_args(str(tiny), str(other), "--max-memory", "0.0001"))
    pool.preload()  # nothing fits: nothing loads, and nothing is refused yet
    lines = [line for line in capsys.readouterr().err.splitlines() if "more than the memory budget" in line]
    assert [line.split(" needs ")[0] for line in lines] == ["hearth: tiny-llama-q8", "hearth: other"]
    assert all("(--max-memory): its requests will get 503 (model_too_large)" in line for line in lines)
    assert all(s.served is None for s in pool.slots)


def test_negative_max_memory_is_one_line(capsys, tiny):
    code, err = run_cli(capsys, "serve", str(tiny), "--max-memory", "-1")
    assert_one_line_error(code, err, "--max-memory must be a positive number of GiB, not -1")


def test_the_models_flag_s_help_lists_every_field_an_entry_takes():
    """serve's and run-batch's --models help listed 9 of the 13 fields (no keep_alive, mmproj, router_threshold,
    router_tool_floor): a reader took it for the whole list."""
    from hearth.commands.models_file import FIELDS

    for command in ("serve", "run-batch"):
        text = " ".join(command_parser(command).format_help().split())
        assert f"[[models]] entries ({', '.join(FIELDS)})" in text, command


def test_missing_models_file_is_one_line(capsys, tmp_path):
    code, err = run_cli(capsys, "serve", "--models", str(tmp_path / "nope.toml"))
    assert_one_line_error(code, err, "--models", "nope.toml", "cannot read it")


def test_a_models_file_with_a_byte_order_mark_reads(tmp_path):
    """A file saved with a UTF-8 BOM (Notepad) was "not valid TOML: Invalid statement (at line 1, column 1)"."""
    (path := tmp_path / "models.toml").write_text('\ufeff[[models]]\nmodel = "smollm2-135m"\nname = "a"\n',
                                                  encoding="utf-8")
    assert [(e.model, e.name) for e in read_models_file(str(path))] == [("smollm2-135m", "a")]


def test_read_models_file_resolves_relative_paths(tmp_path, tiny):
    (tmp_path / "m.toml").write_text(f'[[models]]\nmodel = "{tiny.name}"\n')
    assert read_models_file(str(tmp_path / "m.toml"))[0].model == str(tiny)


def test_router_is_a_pinned_model_of_the_pool_and_each_model_routes_through_it(tiny, tmp_path):
    other = tmp_path / "small.gguf"
    write_tiny_gguf(other, "qwen2")
    pool = build_pool(serve_args(str(tiny), "--router", str(other), "--router-threshold", "0.75", "--max-memory", "4"))
    main, small = (s.spec for s in pool.slots)
    assert small.names[0] == "small" and small.pinned and small.router is None
    assert (main.router.model, main.router.threshold) == ("small", 0.75)
    # a models file: an entry names its router (a model given elsewhere), with its own threshold
    (tmp_path / "models.toml").write_text(f'[[models]]\nname = "big"\nmodel = "{tiny.name}"\nrouter = "small"\n'
                                          'router_threshold = 0.5\n')
    pool = build_pool(serve_args(str(other), "--models", str(tmp_path / "models.toml"), "--max-memory", "4"))
    small, big = (s.spec for s in pool.slots)
    assert (big.router.model, big.router.threshold, small.router, small.pinned) == ("small", 0.5, None, True)


def test_router_tool_floor_from_the_flag_and_per_entry(tiny, tmp_path):
    from hearth.commands.serve import server_config

    other = tmp_path / "small.gguf"
    write_tiny_gguf(other, "qwen2")
    args = serve_args(str(tiny), "--router", str(other), "--router-tool-floor", "0.95", "--max-memory", "4")
    main, _ = (s.spec for s in build_pool(args).slots)
    assert (main.router.threshold, main.router.tool_floor) == (0.3, 0.95)
    assert server_config(args).router_tool_floor == 0.95  # a request's hearth.router gets it too
    assert server_config(serve_args(str(tiny))).router_tool_floor == 0.0  # off by default
    # an entry's own floor over the flag's; another entry without one takes the flag's
    (tmp_path / "models.toml").write_text(f'[[models]]\nname = "big"\nmodel = "{tiny.name}"\nrouter = "small"\n'
                                          'router_tool_floor = 0.5\n'
                                          f'[[models]]\nname = "mid"\nmodel = "{tiny.name}"\nrouter = "small"\n')
    pool = build_pool(serve_args(str(other), "--models", str(tmp_path / "models.toml"), "--router-tool-floor",
                                 "0.9", "--max-memory", "4"))
    _, big, mid = (s.spec for s in pool.slots)
    assert (big.router.tool_floor, mid.router.tool_floor) == (0.5, 0.9)


@pytest.mark.parametrize("argv,toml,needles", [
    (["--router-threshold", "1.5"], None, ["--router-threshold: must be a number in [0, 1], got 1.5"]),
    ([], '[[models]]\nname = "big"\nmodel = "tiny.gguf"\nrouter = "nope"\n',
     ["models[1] ('big'): router: 'nope' is not a model this server serves ('big')"]),
    ([], '[[models]]\nmodel = "tiny.gguf"\nrouter_threshold = 2\n', ["models[1]: router_threshold: must be a number in [0, 1]"]),
    (["--router-tool-floor", "-0.5"], None, ["--router-tool-floor: must be a number in [0, 1], got -0.5"]),
    ([], '[[models]]\nmodel = "tiny.gguf"\nrouter_tool_floor = "high"\n',
     ["models[1]: router_tool_floor: must be a number in [0, 1] (0: off), got 'high'"]),
])
def test_bad_router_settings_are_one_line(capsys, tmp_path, argv, toml, needles):
    write_tiny_gguf(tmp_path / "tiny.gguf", "llama")
    if toml is not None:
        (tmp_path / "models.toml").write_text(toml)
        argv = [*argv, "--models", str(tmp_path / "models.toml")]
    else:
        argv = [*argv, str(tmp_path / "tiny.gguf")]
    code, err = run_cli(capsys, "serve", *argv)
    assert_one_line_error(code, err, *needles)


@pytest.mark.usefixtures("native_speculation")
def test_serve_says_what_speculation_runs(tmp_path, capsys, caplog):
    """A config naming a draft model and no method used to run ngram without a word: the load says the
    method, K and the draft's file, or that the backend turned speculation off, once (the LLM's warning;
    serve's own line said it again: `hearth serve ... --device torch`, a new user's trial)."""
    def lines(path, config):
        pool = build_pool(serve_args(str(path), "--speculative-config", config, "--max-model-len", "64"))
        pool.loader(pool.slots[0].spec)  # its engine thread starts with the server: nothing to stop
        return capsys.readouterr().err

    native = tmp_path / "q8.gguf"
    write_tiny_gguf(native, "qwen2", qtype="Q8_0", **SPECULATES)  # the native kernels' type: speculation on
    assert "q8: speculative decoding: ngram (num_speculative_tokens 3)" in lines(
        native, '{"method": "ngram", "num_speculative_tokens": 3}')
    said = lines(native, f'{{"model": "{native}"}}')  # a path: named once (the summary names it)
    assert f"speculative decoding: draft (num_speculative_tokens 4, draft model {native})\n" in said
    assert said.count(str(native)) == 1
    f32 = tmp_path / "f32.gguf"
    write_tiny_gguf(f32, "qwen2")  # F32 weights: no native kernels, on the CPU backend too
    caplog.clear()
    said = lines(f32, '{"method": "ngram"}') + "".join(r.getMessage() + "\n" for r in caplog.records)
    assert said.count("speculative decoding is off: where a layer's matrices are not of a block type the native kernels "
                      "run (F32, F16 and BF16 run torch's matmul: a quantized GGUF such as Q8_0 speculates)") == 1
    assert "backend" not in said


@pytest.mark.usefixtures("native_speculation")
def test_a_draft_model_speculates_for_the_models_whose_vocabulary_it_shares(tmp_path, capsys):
    """`hearth serve A B -md A` where B has another vocabulary: every request to B got `503
    model_load_failed: ... vocabulary differs`. B is served without speculation, one startup line says
    why, and A drafts as asked."""
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.memory.serving import served_footprint

    coder, small = tmp_path / "coder.gguf", tmp_path / "small.gguf"
    write_tiny_gguf(coder, "qwen2", qtype="Q8_0", vocab=320, **SPECULATES)
    write_tiny_gguf(small, "qwen2", qtype="Q8_0", vocab=384)
    pool = build_pool(serve_args(str(coder), str(small), "-md", str(coder), "--max-model-len", "64",
                                 "--max-memory", "4"))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hearth: small: served without speculative decoding: the draft model" in err
    assert "vocabulary differs from the target's (the target has 384 tokens, the draft 320)" in err
    a, b = (s.spec for s in pool.slots)
    assert pool.loader.by_id["coder"][2]["method"] == "draft" and pool.loader.by_id["small"][2] is None
    assert b.footprint == served_footprint(GGUFFile(small), 64, "auto", 16, 2.0, 2048).total  # no draft counted
    pool.loader(b)  # loads (it raised the vocabulary error), its engine thread not started: nothing to stop
    assert "speculative" not in capsys.readouterr().err
    pool.loader(a)
    assert "hearth: coder: speculative decoding: draft (num_speculative_tokens 4" in capsys.readouterr().err


def test_a_models_file_entry_has_its_own_speculative_config(tmp_path, capsys):
    """An entry's speculative_config (a table of the flag's keys; false: none) overrides the command
    line for that model; a relative draft path is the file's; validated as the flag is."""
    coder, small = tmp_path / "coder.gguf", tmp_path / "small.gguf"
    write_tiny_gguf(coder, "qwen2", qtype="Q8_0", vocab=320)
    write_tiny_gguf(small, "qwen2", qtype="Q8_0", vocab=384)
    (tmp_path / "models.toml").write_text(
        '[[models]]\nname = "a"\nmodel = "coder.gguf"\nspeculative_config = false\n'
        '[[models]]\nname = "b"\nmodel = "small.gguf"\nspeculative_config = { model = "small.gguf", '
        'num_speculative_tokens = 3 }\n'
        '[[models]]\nname = "c"\nmodel = "coder.gguf"\n')
    pool = build_pool(serve_args("--models", str(tmp_path / "models.toml"), "--speculative-config",
                                 '{"method": "ngram", "num_speculative_tokens": 5}', "--max-memory", "4"))
    got = {n: c and (c["method"], c["model"], c["num_speculative_tokens"]) for n, (_, _, c) in pool.loader.by_id.items()}
    assert got == {"a": None, "b": ("draft", str(small), 3), "c": ("ngram", "", 5)}
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("entry,needles", [
    ('speculative_config = { method = "nope" }', ["models[1] ('a'): speculative_config.method 'nope' is unknown"]),
    ('speculative_config = "ngram"', ["models[1] ('a'): speculative_config: must be a table of speculative_config keys"]),
    ('speculative_config = { method = "ngram", model = "x.gguf" }',
     ["models[1] ('a'): speculative_config.model applies to method \"draft\" only"]),
    ('speculative_config = { model = "other.gguf" }',  # named for this model: a misfit is an error, not a skip
     ["models[1] ('a'): speculative_config.model: vocabulary differs from the target's (the target has 320 tokens, "
      "the draft 384)"]),
    ('speculative_config = { model = "nope.gguf" }', ["models[1] ('a'): speculative_config.model 'nope.gguf':"]),
])
def test_a_bad_entry_speculative_config_is_one_line(capsys, tmp_path, entry, needles):
    write_tiny_gguf(tmp_path / "tiny.gguf", "qwen2", vocab=320)
    write_tiny_gguf(tmp_path / "other.gguf", "qwen2", vocab=384)
    (tmp_path / "models.toml").write_text(f'[[models]]\nname = "a"\nmodel = "tiny.gguf"\n{entry}\n')
    code, err = run_cli(capsys, "serve", "--models", str(tmp_path / "models.toml"))
    assert_one_line_error(code, err, *needles)


def test_one_model_with_a_draft_of_another_vocabulary_stays_an_error(capsys, tmp_path):
    target, other = tmp_path / "t.gguf", tmp_path / "d.gguf"
    write_tiny_gguf(target, "qwen2", vocab=320)
    write_tiny_gguf(other, "qwen2", vocab=384)
    code, err = run_cli(capsys, "serve", str(target), "-md", str(other), "--port", "0", "--max-model-len", "64")
    *loading, last = err.splitlines()  # "hearth: loading t (...) ...", then the load's error
    assert code == 1 and len(loading) == 1 and "Traceback" not in err
    assert last == ("hearth: error: speculative_config.model: vocabulary differs from the target's (the target has 320 "
                    "tokens, the draft 384)")


def test_keep_alive_from_the_flag_and_per_entry(tiny, tmp_path):
    """--keep-alive (Ollama's OLLAMA_KEEP_ALIVE) is each model's, a --models entry's `keep_alive` its own (llama-swap's
    per-model ttl); a model alone is then no longer pinned (it may go when idle); pinned ones stay pinned."""
    import math

    assert build_pool(serve_args(str(tiny))).slots[0].spec.keep_alive == math.inf  # as before: forever
    alone = build_pool(serve_args(str(tiny), "--keep-alive", "5m")).slots[0].spec
    assert (alone.keep_alive, alone.pinned) == (300, False)
    (tmp_path / "models.toml").write_text(
        f'[[models]]\nname = "a"\nmodel = "{tiny}"\nkeep_alive = "1h30m"\n'
        f'[[models]]\nname = "b"\nmodel = "{tiny}"\nkeep_alive = -1\n'
        f'[[models]]\nname = "c"\nmodel = "{tiny}"\npinned = true\n'
        f'[[models]]\nname = "d"\nmodel = "{tiny}"\n')
    pool = build_pool(serve_args("--models", str(tmp_path / "models.toml"), "--keep-alive", "300"))
    assert [(s.spec.keep_alive, s.spec.pinned) for s in pool.slots] == [(5400, False), (math.inf, False),
                                                                          (300, True), (300, False)]
    assert [s.keep_alive for s in pool.slots] == [5400, math.inf, 300, 300]  # what the slots start with


@pytest.mark.parametrize("value", ["soon", "5 m", "1d"])
def test_a_bad_keep_alive_flag_is_argparse_s_line_naming_it(capsys, value):
    with pytest.raises(SystemExit):
        serve_args("m", "--keep-alive", value)
    assert capsys.readouterr().err == (  # one line: argparse's usage above it is gone
        f"hearth serve: error: argument --keep-alive: must be a duration such as 5m, 1h30m, 300 (seconds) or -1 "
        f"(forever), not {value!r} (hearth serve --help lists the options)\n")


def test_an_entry_s_threads_minus_one_is_every_core_as_the_flag_s(tiny, tmp_path):
    """`threads = -1` was refused while `--threads -1` (llama.cpp's default) runs on every core: an entry's -1 is
    every core too, whatever --threads says; its 0 is --threads's."""
    import torch

    (tmp_path / "models.toml").write_text(
        '[[models]]\nname = "all"\nmodel = "tiny-llama-q8.gguf"\nthreads = -1\n'
        '[[models]]\nname = "flag"\nmodel = "tiny-llama-q8.gguf"\n'
        '[[models]]\nname = "own"\nmodel = "tiny-llama-q8.gguf"\nthreads = 3\n')
    pool = build_pool(serve_args("--models", str(tmp_path / "models.toml"), "--threads", "1"))
    got = {name: pool.loader.threads(entry) for name, (entry, _, _) in pool.loader.by_id.items()}
    assert got == {"all": torch.get_num_threads(), "flag": 1, "own": 3}


def test_an_entry_s_threads_past_the_cpus_is_said_naming_its_field(tiny, tmp_path, caplog):
    """`threads = 999` warned "--threads 999 is more than ...": a flag the user did not type."""
    import os

    import torch

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    (tmp_path / "models.toml").write_text(f'[[models]]\nname = "big"\nmodel = "tiny-llama-q8.gguf"\nthreads = {cpus + 1}\n')
    pool = build_pool(serve_args("--models", str(tmp_path / "models.toml"), "--max-model-len", "64"))
    before = torch.get_num_threads()
    try:
        with caplog.at_level("WARNING", logger="hearth"):
            pool.loader(pool.slots[0].spec)  # its engine thread starts with the server: nothing to stop
    finally:
        torch.set_num_threads(before)
    said = [r.getMessage() for r in caplog.records if "CPUs this process may use" in r.getMessage()]
    assert said == [f"models.toml: models[1] ('big'): threads = {cpus + 1} is more than the {cpus} CPUs this process "
                    "may use: steps run slower, not faster"]


def test_an_unloaded_model_s_known_facts_come_from_its_header_and_the_flags(tiny, tmp_path):
    """What the routes check a request against before the load (ModelPool.known): the header's vocabulary, width
    and pooling, and the LoRA adapters the flags give the first model (hearth.api.model_spec.Known)."""
    other = tmp_path / "other.gguf"
    write_tiny_gguf(other, "qwen2")
    pool = build_pool(serve_args(str(tiny), str(other), "--lora", "a.gguf", "--lora-modules", "ada=b.gguf"))
    first, second = (pool.known(s.spec.name) for s in pool.slots)
    assert (first.lora_count, second.lora_count) == (2, 0)
    assert first.vocab_size and first.embedding_size and first.pooling and first.embeds_only is False
    assert first.max_model_len == pool.slots[0].spec.max_model_len > 0
