"""`hearth run` / `hearth serve` LoRA flags: llama-server's and vLLM's spellings in the order given (the
adapters' ids), the adapter's answer as the library gives it, and a file that is no adapter one line."""

from __future__ import annotations

import pytest

from hearth.cli import command_parser, main
from hearth.commands.lora_flags import lora_entries, lora_names
from tests.test_cli import GREEDY, PROMPT
from tests.test_llm_lora import files  # noqa: F401  (the module's files fixture)


def test_flags_keep_their_order_and_spellings():
    args = command_parser("serve").parse_intermixed_args(
        ["m", "--lora", "a.gguf", "--lora-scaled", "b.gguf", "0.5", "--enable-lora", "--lora-modules", "x=c.gguf",
         "y=d.gguf", '{"name": "z", "path": "e.gguf", "base_model_name": "m"}'])
    assert lora_entries(args) == [("a.gguf", 1.0), ("b.gguf", 0.5), ("c.gguf", 0.0), ("d.gguf", 0.0), ("e.gguf", 0.0)]
    assert lora_names(args) == {"x": 2, "y": 3, "z": 4}  # vLLM's JSON form too
    listed = command_parser("serve").parse_intermixed_args(["m", "--lora", "a.gguf,b.gguf", "--lora", "c.gguf"])
    assert lora_entries(listed) == [("a.gguf", 1.0), ("b.gguf", 1.0), ("c.gguf", 1.0)]  # llama-server's list form
    off = command_parser("run").parse_intermixed_args(["m", "--lora", "a.gguf", "--lora-init-without-apply"])
    assert lora_entries(off) == [("a.gguf", 0.0)]


def test_vllms_adapter_caps_are_taken():
    """A vLLM command line's --max-loras N --max-lora-rank R runs unchanged (hearth has neither cap); they were
    argparse's "unrecognized arguments"."""
    args = command_parser("serve").parse_intermixed_args(
        ["m", "--enable-lora", "--max-loras", "4", "--max-lora-rank", "64", "--lora-modules", "x=c.gguf"])
    assert lora_names(args) == {"x": 0} and (args.max_loras, args.max_lora_rank) == (4, 64)


@pytest.mark.parametrize("argv, needle", [(["--lora-scaled", "a.gguf", "half"], "SCALE must be a number"),
                                          (["--lora-modules", "nameless.gguf"], "takes NAME=FILE"),
                                          (["--lora-modules", '{"name": "x"}'], "takes NAME=FILE or vLLM's JSON")])
def test_bad_flags_are_one_line(argv, needle, capsys):
    with pytest.raises(SystemExit):
        command_parser("serve").parse_intermixed_args(["m", *argv])
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--lora-modules", "base=a.gguf"], ["--served-model-name", "sm", "--lora-modules", "sm=a.gguf"]])
def test_an_adapter_named_as_a_model_is_one_line(files, argv):  # noqa: F811
    """It would take that model's requests over (the base unreachable): refused at start."""
    from hearth.commands.serve_models import build_pool
    from hearth.errors import HearthError

    args = command_parser("serve").parse_intermixed_args([str(files / "base.gguf"), *argv])
    with pytest.raises(HearthError, match="is already the name of .*; give the adapter its own name"):
        build_pool(args)


def test_a_modules_base_model_name_is_the_first_model(files):  # noqa: F811
    """vLLM's JSON form's base_model_name (its /v1/models parent) was ignored: the adapter went to the first model
    whatever it named; now a name that is not the first model's is one line, and one that is, its parent."""
    from hearth.api.model_cards import card
    from hearth.commands.serve_models import build_pool
    from hearth.errors import HearthError

    base, adapter = str(files / "base.gguf"), str(files / "adapter.gguf")

    def pool(name: str, *more: str):
        module = '{"name": "ada", "path": "%s", "base_model_name": "%s"}' % (adapter, name)
        return build_pool(command_parser("serve").parse_intermixed_args([base, *more, "--lora-modules", module]))
    for name, more, parent in (("base", [], "base"), (base, [], "base"), ("base.gguf", [], "base"),
                               ("sm", ["--served-model-name", "sm"], "sm")):
        served = pool(name, *more)
        assert card(served.slots[0], "ada")["parent"] == parent
    with pytest.raises(HearthError, match=r"^--lora-modules ada: base_model_name 'other' is not the first model "
                                          r"\('base'\), the one hearth applies --lora-modules adapters to$"):
        pool("other")


def test_run_answers_with_the_adapter(files, capsys):  # noqa: F811
    from hearth import LLM, SamplingParams

    base, adapter = str(files / "base.gguf"), str(files / "adapter.gguf")
    llm = LLM(base, progress=False, max_model_len=256, max_num_seqs=1, lora=[(adapter, 0.5)])
    expected = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=6))[0].outputs[0].text
    assert main(["run", base, PROMPT, *GREEDY, "--raw", "--lora-scaled", adapter, "0.5"]) == 0
    assert capsys.readouterr().out == expected + "\n"
    assert main(["run", base, PROMPT, *GREEDY, "--raw", "--lora", base]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a LoRA adapter" in err[0], err
