"""The benchmark's fixed prompts (hearth/data/bench/speculative.json): code edit, code
generation, chat and a table where drafts keep failing, as OpenAI chat messages that each server
templates itself."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.bench import BenchError, corpus


@dataclass(frozen=True, slots=True)
class SpecPrompt:
    name: str
    about: str
    messages: tuple[dict, ...]


def _messages(entry: dict) -> tuple[dict, ...]:
    user = entry.get("user")
    if "file" in entry:  # the file is shown first, whole, so the answer can copy it
        code = corpus.code_file(entry["file"])
        shown = entry["file"].removesuffix(".txt")
        user = f"Here is `{shown}`:\n\n```python\n{code}```\n\n{entry['instruction']}"
    return ({"role": "system", "content": entry["system"]}, {"role": "user", "content": user})


def names() -> tuple[str, ...]:
    return tuple(corpus.speculative())


def spec_prompt(name: str) -> SpecPrompt:
    data = corpus.speculative()
    if name not in data:
        raise BenchError(f"unknown workload {name!r}; known: {', '.join(data)}")
    return SpecPrompt(name, data[name]["about"], _messages(data[name]))
