"""resolve_model for every accepted form, and one real pull of the default model through the CLI."""

from __future__ import annotations

import hashlib
import re
import time

import pytest

from hearth import cli
from hearth.errors import ModelNotFoundError
from hearth.loader import download
from hearth.loader.catalog import CATALOG, DEFAULT_MODEL
from hearth.loader.resolve import resolve_model


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HEARTH_HOME", str(home))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: any network use fails
    return home


def run_cli(argv, capsys, monkeypatch):
    # only our two subcommands, taken from the real table, so other commands' imports don't matter here
    monkeypatch.setattr(cli, "COMMANDS", {k: cli.COMMANDS[k] for k in ("pull", "models")})
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_catalog_entries_are_consistent():
    assert DEFAULT_MODEL in CATALOG
    for name, e in CATALOG.items():
        assert e.name == name and re.fullmatch(r"[0-9a-f]{64}", e.sha256) and e.file_name.endswith(".gguf")
        assert e.parts and all(p.requirement == f"{p.package}=={p.version}" for p in e.parts)
    gemma = CATALOG["gemma3-270m"]
    assert [p.member.rsplit(".", 1)[1] for p in gemma.parts] == ["part00", "part01", "part02", "part03"]
    assert len(gemma.requirements) == 4


def test_local_file_any_name_is_used_in_place(home, tmp_path, monkeypatch):
    f = tmp_path / "my weights.bin"
    f.write_bytes(b"GGUF")
    assert resolve_model(str(f)) == f
    monkeypatch.chdir(tmp_path)
    assert resolve_model("my weights.bin").samefile(f)
    assert not home.exists()  # nothing copied, nothing downloaded


@pytest.mark.parametrize("name", ["./missing.gguf", "/nonexistent/dir/model.gguf", "~/no-such-hearth-model.gguf",
                                  "missing.gguf"])
def test_path_that_does_not_exist(home, name):
    with pytest.raises(ModelNotFoundError, match=f"^model file not found: {re.escape(name)}$"):
        resolve_model(name)


def test_a_path_without_gguf_lists_the_forms(home):
    """`hearth pull nosuchorg/nosuchrepo`: a hub model needs its file named (org/repo:file.gguf)."""
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("nosuchorg/nosuchrepo")
    msg = str(e.value)
    assert msg.startswith("model file not found: nosuchorg/nosuchrepo; use a catalog name (")
    assert "a path to a .gguf file" in msg and "org/repo:file.gguf" in msg and "\n" not in msg


def test_directory_is_not_a_model(home, tmp_path):
    with pytest.raises(ModelNotFoundError, match="is a directory; name the .gguf file inside it"):
        resolve_model(str(tmp_path))


def test_garbage_lists_catalog_and_forms(home):
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("llama-9000")
    msg = str(e.value)
    assert "'llama-9000'" in msg and "org/repo:file.gguf" in msg and "hf://" in msg and "\n" not in msg
    assert all(name in msg for name in CATALOG)


def test_not_downloaded_without_download(home):
    with pytest.raises(ModelNotFoundError, match="run `hearth pull smollm2-135m`"):
        resolve_model("smollm2-135m", download=False)
    with pytest.raises(ModelNotFoundError, match="run `hearth pull org/repo:m.gguf`"):
        resolve_model("org/repo:m.gguf", download=False)


def test_hub_reference_already_on_disk(home):
    stored = home / "hub" / "org" / "repo" / "m.gguf"
    stored.parent.mkdir(parents=True)
    stored.write_bytes(b"GGUF")
    # HF_ENDPOINT points nowhere: these succeed only because nothing is fetched
    assert resolve_model("org/repo:m.gguf") == stored
    assert resolve_model("hf://org/repo/m.gguf") == stored


@pytest.mark.parametrize("link", [
    "https://huggingface.co/org/repo/resolve/main/m.gguf",  # the hub page's download link ...
    "https://huggingface.co/org/repo/resolve/main/m.gguf?download=true",  # ... as its button gives it
    "https://huggingface.co/org/repo/blob/main/m.gguf",  # the file's page
    "https://hf.co/org/repo/resolve/main/m.gguf",
    "http://127.0.0.1:9/org/repo/resolve/main/m.gguf",  # HF_ENDPOINT's host: a mirror's link
    "hf.co/org/repo:m.gguf",  # ollama's hf.co/ prefix
])
def test_a_hub_file_s_link_is_a_hub_reference(home, link):
    """A link copied from the hub's page was "model file not found: https://..." without the forms that work."""
    stored = home / "hub" / "org" / "repo" / "m.gguf"
    stored.parent.mkdir(parents=True)
    stored.write_bytes(b"GGUF")
    assert resolve_model(link) == stored
    if "/main/" in link:  # a link's revision and folders are the reference's
        at_rev = home / "hub" / "org" / "repo@v2" / "sub" / "m.gguf"
        at_rev.parent.mkdir(parents=True)
        at_rev.write_bytes(b"GGUF")
        assert resolve_model(link.replace("main/m.gguf", "v2/sub/m.gguf")) == at_rev


@pytest.mark.parametrize("name, message", [
    ("org/repo:README.md", "must name a .gguf file"),
    ("org/repo:../../escape.gguf", "unsafe file path"),
    ("hf://org/repo/a//b.gguf", "unsafe file path"),
    ("https://huggingface.co/org/repo/resolve/main/a/../../b.gguf", "unsafe file path"),
    ("https://huggingface.co/org/repo", "is a repo's page: name one of its .gguf files, org/repo:FILE.gguf"),
    ("https://huggingface.co/org/repo/tree/main", "is a repo's page: name one of its .gguf files, org/repo:FILE.gguf"),
    ("https://example.com/m.gguf", "hearth downloads Hugging Face hub files only"),
    ("hf.co/org/repo:Q4_K_M", "must name a .gguf file: org/repo:FILE.gguf (not a quantization tag, as ollama's)"),
])
def test_bad_hub_references(home, name, message):
    with pytest.raises(ModelNotFoundError, match=re.escape(message)):
        resolve_model(name)


def test_real_pull_of_default_model_via_cli(home, capsys, monkeypatch):
    entry = CATALOG["smollm2-135m"]
    rc, out, _ = run_cli(["models"], capsys, monkeypatch)
    assert rc == 0 and re.search(r"^smollm2-135m\s+98\.4 MB\s+llama/Q4_1\s+no$", out, re.M)

    t0 = time.perf_counter()
    rc, out, err = run_cli(["pull", "smollm2-135m"], capsys, monkeypatch)
    seconds = time.perf_counter() - t0
    path = home / "models" / "smollm2-135m" / entry.file_name
    assert rc == 0 and out == f"{path}\n", err
    assert path.stat().st_size == entry.size
    with open(path, "rb") as f:  # an independent hash of the installed file against the pinned one
        assert hashlib.file_digest(f, "sha256").hexdigest() == entry.sha256
    with capsys.disabled():
        print(f"\nreal pull of smollm2-135m: {seconds:.1f} s")

    rc, out, _ = run_cli(["models"], capsys, monkeypatch)
    assert re.search(rf"^smollm2-135m\s+98\.4 MB\s+llama/Q4_1\s+yes  {re.escape(str(path))}$", out, re.M)
    assert re.search(r"^gemma3-270m\s+253\.1 MB\s+gemma3/Q4_K_M\s+no$", out, re.M)

    # from now on it is on disk: no pip, and `pull` again just prints the path
    monkeypatch.setattr(download, "pip_download", lambda *a, **k: pytest.fail("downloaded again"))
    assert resolve_model("smollm2-135m", download=False) == path
    assert run_cli(["pull", "-q", "smollm2-135m"], capsys, monkeypatch)[:2] == (0, f"{path}\n")


def test_cli_pull_unknown_model_is_one_error_line(home, capsys, monkeypatch):
    rc, out, err = run_cli(["pull", "llama-9000"], capsys, monkeypatch)
    assert (rc, out) == (1, "")
    assert err.startswith("hearth: error: unknown model 'llama-9000'") and err.count("\n") == 1


@pytest.mark.parametrize("head", [b"not a model\n", b""])
def test_cli_pull_of_a_local_file_not_a_gguf_is_one_error_line(home, tmp_path, capsys, monkeypatch, head):
    """`hearth pull notes.txt` printed its path and exited 0, and `hearth run` then refused it: checked as run
    checks it (its magic); a GGUF is its own path, as before."""
    f = tmp_path / "notes.txt"
    f.write_bytes(head)
    rc, out, err = run_cli(["pull", str(f)], capsys, monkeypatch)
    assert (rc, out) == (1, "")
    assert err.splitlines() == [f"hearth: error: {f}: not a GGUF file (bad magic {head[:4]!r}, expected b'GGUF')"]
    f.write_bytes(b"GGUF")
    assert run_cli(["pull", str(f)], capsys, monkeypatch) == (0, f"{f}\n", "")


def test_models_lists_a_hub_file_s_arch_and_quant_from_its_header(home, capsys, monkeypatch):
    """`hearth models` showed "-" under ARCH/QUANT for every downloaded hub file; a file whose header does not
    read (a partial download) stays "-", the listing goes on."""
    from tests.gguf_factory import write_tiny_gguf

    repo = home / "hub" / "org" / "repo"
    repo.mkdir(parents=True)
    write_tiny_gguf(repo / "tiny.gguf", "llama", qtype="Q8_0")  # no general.file_type: its matrices' type
    (repo / "cut.gguf").write_bytes(b"GGUF")
    rc, out, _ = run_cli(["models"], capsys, monkeypatch)
    rows = {line.split()[0]: line.split()[3] for line in out.splitlines() if line.startswith("org/")}
    assert rc == 0 and rows == {"org/repo:cut.gguf": "-", "org/repo:tiny.gguf": "llama/Q8_0"}, out
