"""Which served model reads images: --mmproj is the first model's (as --lora's adapters), a --models entry's
`mmproj` gives any model its own, and the startup lines say who reads them, as hearth's other startup lines."""

from __future__ import annotations

import shutil

import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.cli import command_parser
from hearth.commands.serve import server_config
from hearth.commands.serve_models import build_pool
from hearth.errors import HearthError
from hearth.media.config import read_vision_config
from tests.test_vision_cli import asking, files, png  # noqa: F401 - files: the module's fixture


def serve(argv: list[str]):
    args = command_parser("serve").parse_intermixed_args([*argv, "--max-model-len", "256"])
    return TestClient(create_app(build_pool(args), server_config(args)))


def ask(c, model: str) -> int:
    r = c.post("/v1/chat/completions", json={"model": model, "messages": [asking(png((9, 80, 9)), "hi")],
                                             "max_tokens": 2, "temperature": 0})
    return r.status_code


def test_mmproj_is_the_first_model_s_and_an_entry_gives_another_its_own(files, tmp_path, capsys):
    model, mmproj, _ = files
    other = tmp_path / "other.gguf"
    shutil.copy(model, other)
    shutil.copy(mmproj, tmp_path / "mm.gguf")
    with serve([str(model), str(other), "--mmproj", str(mmproj)]) as c:
        assert ask(c, model.stem) == 200 and ask(c, "other") == 400
    err = capsys.readouterr().err
    assert f"hearth: images: {model.stem} (--mmproj is the first model's;" in err
    n = read_vision_config(mmproj).num_embeds
    line = f"hearth: {model.stem} reads images (mmproj {mmproj}: gemma3 projector, {n} tokens an image)\n"
    assert line in err and "INFO" not in err  # as hearth's other startup lines, not a log line
    (tmp_path / "models.toml").write_text(f'[[models]]\nmodel = "{model}"\nname = "a"\n\n'
                                          '[[models]]\nmodel = "other.gguf"\nname = "b"\nmmproj = "mm.gguf"\n')
    with serve(["--models", str(tmp_path / "models.toml")]) as c:
        assert ask(c, "a") == 400 and ask(c, "b") == 200
    assert "hearth: images: b (--mmproj" in capsys.readouterr().err


def test_a_wrong_entry_mmproj_is_one_line_at_start(files, tmp_path):
    model, _, _ = files
    (tmp_path / "models.toml").write_text(f'[[models]]\nmodel = "{model}"\nname = "a"\nmmproj = "no.gguf"\n')
    with pytest.raises(HearthError, match=r"models.toml: models\[1\] \('a'\): mmproj: no.gguf: no such file"):
        build_pool(command_parser("serve").parse_intermixed_args(["--models", str(tmp_path / "models.toml")]))
    (tmp_path / "models.toml").write_text(f'[[models]]\nmodel = "{model}"\nname = "a"\nmmproj = "{model}"\n')
    with pytest.raises(HearthError, match=r"models.toml: models\[1\] \('a'\): .*projector_type"):
        build_pool(command_parser("serve").parse_intermixed_args(["--models", str(tmp_path / "models.toml")]))


def test_ollama_show_has_the_projector_s_info(files, tmp_path):
    """Ollama's /api/show `projector_info` (the mmproj's metadata; `ollama show` prints its architecture,
    parameters and embedding length) for a model served with one; none for the others."""
    model, mmproj, _ = files
    other = tmp_path / "other.gguf"
    shutil.copy(model, other)
    with serve([str(model), str(other), "--mmproj", str(mmproj)]) as c:
        for name in (model.stem, "other"):  # loaded: the facts are the served model's (before: its file's)
            c.post("/v1/chat/completions", json={"model": name, "messages": [{"role": "user", "content": "hi"}],
                                                 "max_tokens": 1})
        info = c.post("/api/show", json={"model": model.stem}).json()["projector_info"]
        assert info["general.architecture"] == "clip" and info["clip.projector_type"] == "gemma3"
        assert info["general.parameter_count"] > 0 and info["clip.vision.embedding_length"] > 0
        assert "projector_info" not in c.post("/api/show", json={"model": "other"}).json()


def test_metrics_count_images(files):
    """/metrics: images prepared for requests, the tower's encodes and their seconds, per model read images."""
    model, mmproj, _ = files
    with serve([str(model), "--mmproj", str(mmproj)]) as c:
        for _ in range(2):
            assert ask(c, model.stem) == 200
        text = c.get("/metrics").text
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line.startswith("hearth:image")}
    label = f'{{model_name="{model.stem}"}}'
    assert samples[f"hearth:images_prepared_total{label}"] == 2
    assert samples[f"hearth:images_encoded_total{label}"] >= 1  # the second: rows cached (prefix cache, runner's)
    assert samples[f"hearth:image_encode_seconds_total{label}"] > 0


def test_which_model_reads_images_is_known_before_its_load(files, tmp_path):
    """The pool records each model's Vision from its mmproj's header and the image flags (FileFacts.vision, as the
    loaded model's): an image for a model that reads text only, or one past --limit-mm-per-prompt, is refused with
    nothing loaded for it, and /v1/models says which model reads images before it loads."""
    model, mmproj, _ = files
    for name in ("b.gguf", "c.gguf", "mm.gguf"):
        shutil.copy(mmproj if name == "mm.gguf" else model, tmp_path / name)
    (tmp_path / "models.toml").write_text(f'[[models]]\nmodel = "{model}"\nname = "a"\n\n'
                                          '[[models]]\nmodel = "b.gguf"\nname = "b"\nmmproj = "mm.gguf"\n\n'
                                          '[[models]]\nmodel = "c.gguf"\nname = "c"\n')
    args = command_parser("serve").parse_intermixed_args(["--models", str(tmp_path / "models.toml"),
                                                          "--limit-mm-per-prompt", "image=1", "--max-model-len", "256"])
    pool = build_pool(args)
    a, b, c = (pool.known(s.spec.name) for s in pool.slots)
    assert a.vision is None and c.vision is None and b.vision.max_images == 1
    assert b.vision.cfg.num_embeds == read_vision_config(mmproj).num_embeds
    with TestClient(create_app(pool, server_config(args))) as client:
        assert client.get("/v1/models").json()["data"][1]["hearth"]["vision"]["mmproj"] == str(tmp_path / "mm.gguf")
        assert ask(client, "c") == 400
        two = asking(png((9, 80, 9)), "hi")
        two["content"].insert(0, two["content"][0])
        r = client.post("/v1/chat/completions", json={"model": "b", "messages": [two], "max_tokens": 2})
        assert r.status_code == 400 and "--limit-mm-per-prompt" in r.text
        assert [s.served for s in pool.slots] == [None, None, None]  # nothing loaded to answer them
        assert ask(client, "b") == 200 and pool.known("b").vision.max_images == 1  # loaded: its own, the same flags
