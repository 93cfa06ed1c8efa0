"""A generated section replaces exactly the text between the perf markers; every other byte stays,
and a document without its markers (or with them twice, or backwards) is a one-line error."""

from __future__ import annotations

import pytest

from hearth.bench import BenchError
from hearth.bench.readme_section import BEGIN, END, replace_section, write_section

DOC = f"# hearth\n\nintro\n\n## Performance\n\n{BEGIN}\nold table\n\nold text\n{END}\n\n## Next\ntail\n"


def test_replaces_only_between_the_markers():
    new = replace_section(DOC, "| a | b |\n|---|---|\n")
    assert new == f"# hearth\n\nintro\n\n## Performance\n\n{BEGIN}\n| a | b |\n|---|---|\n{END}\n\n## Next\ntail\n"
    assert replace_section(new, "| a | b |\n|---|---|\n") == new           # twice: the same document
    assert replace_section(new, "\n\nx") == replace_section(DOC, "x")     # blank lines around it trimmed


def test_markers_on_one_line():
    assert replace_section(f"a {BEGIN}{END} b", "x") == f"a {BEGIN}\nx\n{END} b"


@pytest.mark.parametrize("doc, message", [
    ("# no markers\n", f"README.md has no {BEGIN} marker; it needs exactly one {BEGIN} and one {END} "
                       "around the section to replace"),
    (f"{BEGIN}\nx\n", f"README.md has no {END} marker"),
    (f"{BEGIN}\n{BEGIN}\n{END}\n", f"README.md has 2 {BEGIN} markers; it needs exactly one"),
    (f"{END}\nx\n{BEGIN}\n", f"README.md: {END} comes before {BEGIN}"),
])
def test_bad_markers(doc, message):
    with pytest.raises(BenchError) as e:
        replace_section(doc, "x", "README.md")
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_write_section_keeps_line_endings(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_bytes(f"top\r\n{BEGIN}\r\nold\r\n{END}\r\nbottom\r\n".encode())
    write_section(readme, "new\n")
    assert readme.read_bytes() == f"top\r\n{BEGIN}\nnew\n{END}\r\nbottom\r\n".encode()


def test_write_section_errors(tmp_path):
    with pytest.raises(BenchError, match="cannot read .*missing.md: No such file"):
        write_section(tmp_path / "missing.md", "x")
    plain = tmp_path / "plain.md"
    plain.write_text("nothing here\n")
    with pytest.raises(BenchError, match=f"plain.md has no {BEGIN} marker"):
        write_section(plain, "x")
    assert plain.read_text() == "nothing here\n"
