"""Put a generated section into a document between two marker comments, leaving every other byte
as it was. The markers are placed by a person; a document without them is an error, never a guess
at where the section should go."""

from __future__ import annotations

from pathlib import Path

from hearth.bench import BenchError

BEGIN = "<!-- perf:begin -->"
END = "<!-- perf:end -->"


def replace_section(text: str, section: str, where: str = "the document", begin: str = BEGIN,
                    end: str = END) -> str:
    """text with everything between `begin` and `end` replaced by section (on lines of its own)."""
    for marker in (begin, end):
        n = text.count(marker)
        if n != 1:
            found = "no" if n == 0 else f"{n}"
            raise BenchError(f"{where} has {found} {marker} marker{'s' if n > 1 else ''}; it needs exactly one "
                             f"{begin} and one {end} around the section to replace")
    i, j = text.index(begin) + len(begin), text.index(end)
    if j < i:
        raise BenchError(f"{where}: {end} comes before {begin}")
    return f"{text[:i]}\n{section.strip(chr(10))}\n{text[j:]}"


def write_section(path: str | Path, section: str) -> None:
    path = Path(path)
    try:
        with open(path, encoding="utf-8", newline="") as f:  # newline="": line endings stay as they are
            text = f.read()
    except OSError as e:
        raise BenchError(f"cannot read {path}: {e.strerror or e}") from None
    new = replace_section(text, section, str(path))
    try:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(new)
    except OSError as e:
        raise BenchError(f"cannot write {path}: {e.strerror or e}") from None
