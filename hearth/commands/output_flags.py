"""What `hearth run`'s answer is held to: llama-cli's --grammar / --grammar-file (GBNF, or Lark in llguidance's
dialect) and -j / --json-schema / -jf / --json-schema-file, and ollama run's --format json. Each becomes the
StructuredOutput a server request's grammar, json_schema or response_format would; a bad one is one line
naming its flag before the model loads."""

from __future__ import annotations

import argparse

from hearth.commands.json_flag import json_flag
from hearth.errors import HearthError

FLAGS = {  # flag -> (its dest, the StructuredOutput field it sets, whether it names a file)
    "--grammar": ("grammar", "grammar", False),
    "--grammar-file": ("grammar_file", "grammar", True),
    "--json-schema": ("json_schema", "json_schema", False),
    "--json-schema-file": ("json_schema_file", "json_schema", True),
}


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    one = p.add_mutually_exclusive_group()
    one.add_argument("--format", choices=["json"], default=None,
                     help="json: each answer is one JSON object, held to it by a grammar (ollama run's --format json)")
    one.add_argument("--grammar", metavar="GBNF", default=None,
                     help="each answer follows this grammar: llama.cpp's GBNF (root ::= ...) or Lark in "
                          "llguidance's dialect (start: ...) (llama-cli's)")
    one.add_argument("--grammar-file", metavar="FILE", default=None, help="--grammar from a file (llama-cli's)")
    one.add_argument("--json-schema", "-j", metavar="SCHEMA", default=None,
                     help="each answer is JSON valid against this JSON schema, e.g. '{\"type\": \"object\"}' "
                          "(llama-cli's -j)")
    one.add_argument("--json-schema-file", "-jf", metavar="FILE", default=None,
                     help="--json-schema from a file (llama-cli's -jf)")


def structured_output(args: argparse.Namespace):
    """The StructuredOutput the flags ask for (None: free text), compiled once here so that a bad grammar or
    schema is one line naming its flag, not a failure after the load."""
    from hearth.sample.grammar import InvalidStructuredOutput, compile_grammar
    from hearth.sampling_params import StructuredOutput

    if args.format == "json":
        return StructuredOutput(json_object=True)
    given = [(flag, spec) for flag, spec in FLAGS.items() if getattr(args, spec[0]) is not None]
    if not given:
        return None
    flag, (dest, field, is_file) = given[0]
    text = getattr(args, dest)
    shown = f"{flag} {text}" if is_file else flag
    if is_file:
        text = read_text_file(flag, text)
    value = json_flag(shown, text, "JSON schema keywords") if field == "json_schema" else text
    try:
        so = StructuredOutput(**{field: value})
        compile_grammar(so)
    except InvalidStructuredOutput as e:
        raise HearthError(f"{shown}: {e}") from None
    return so


def read_text_file(flag: str, path: str) -> str:
    """The UTF-8 text of the file a flag names; one line naming the flag and the reason if it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise HearthError(f"{flag} {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise HearthError(f"{flag} {path}: not UTF-8 text") from None
