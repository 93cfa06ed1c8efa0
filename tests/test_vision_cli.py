"""`hearth run` with images as a llama-mtmd-cli user types them: --image FILE or URL checked before the model
loads (a bad one named by its flag, not by the API's field), /image FILE in a chat for the next message, and a
model without a chat template refused in one line; on a tiny gemma3 LM with a tiny Gemma 3 projector."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from hearth import LLM, SamplingParams
from hearth.cli import main
from tests import mmproj_factory
from tests.gguf_factory import tiny_dir

SAMPLE = SamplingParams(temperature=0, max_tokens=4)
ARGS = ["--temperature", "0", "-n", "4", "--ctx", "256"]


def png(color: tuple[int, int, int], size=(40, 24)) -> bytes:
    out = io.BytesIO()
    img = Image.new("RGB", size, color)
    img.putpixel((3, 5), (255 - color[0], 7, 200))
    img.save(out, "PNG")
    return out.getvalue()


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def asking(data: bytes, text: str) -> dict:
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(data)}},
                                        {"type": "text", "text": text}]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("vision-cli")
    model, mmproj, _ = mmproj_factory.tiny_vision_model(d)
    base = tmp_path_factory.mktemp("base")
    _, base_name, _ = tiny_dir(base, "gemma3")  # no chat template: a base model
    return model, mmproj, base / base_name


@pytest.fixture(scope="module")
def llm(files):
    model, mmproj, _ = files
    return LLM(str(model), mmproj=str(mmproj), max_model_len=256, progress=False)


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_image_on_a_model_without_a_chat_template_is_one_line(files, tmp_path, capsys):
    """It was a traceback (the prompt's parts handed to the tokenizer as text); --chat chats in a built-in one."""
    _, mmproj, base = files
    image = tmp_path / "a.png"
    image.write_bytes(png((5, 99, 180)))
    argv = ["run", str(base), "hi", *ARGS, "--mmproj", str(mmproj), "--image", str(image)]
    assert main(argv) == 1
    assert "has no chat template, and --image needs a chat: add --chat" in one_line(capsys)
    assert main([*argv, "--chat"]) == 0
    capsys.readouterr()
    assert main([*argv, "--raw"]) == 1
    assert "--image is a chat's, and --raw completes text: drop one of them" in one_line(capsys)


def test_a_bad_image_is_named_by_its_flag_before_the_model_loads(files, tmp_path, capsys, monkeypatch):
    model, mmproj, _ = files
    bad = tmp_path / "notimg.png"
    bad.write_bytes(b"not an image")
    monkeypatch.setattr("hearth.llm.LLM", lambda *a, **k: pytest.fail("the model loaded"))
    argv = ["run", str(model), "hi", *ARGS, "--mmproj", str(mmproj)]
    assert main([*argv, "--image", str(bad)]) == 1
    assert one_line(capsys) == f"hearth: error: --image {bad}: not an image"
    assert main([*argv, "--image", "data:image/png;base64,AAAA"]) == 1
    assert one_line(capsys) == "hearth: error: --image data:image/png;base64,...: not an image"
    assert main([*argv, "--image", "http://127.0.0.1:9/x.png"]) == 1  # the discard port: nothing listens
    assert one_line(capsys).startswith("hearth: error: --image http://127.0.0.1:9/x.png: fetching")


def test_image_given_as_a_data_url(files, llm, capsys):
    model, mmproj, _ = files
    data = png((5, 99, 180))
    want = llm.chat([asking(data, "hi")], SAMPLE)[0].outputs[0].text
    assert main(["run", str(model), "hi", *ARGS, "--mmproj", str(mmproj), "--image", data_url(data), "--verbose"]) == 0
    out, err = capsys.readouterr()
    assert out == want + "\n"
    assert f"hearth: {model} reads images (mmproj {mmproj}: gemma3 projector, " in err  # serve's line, with --verbose


def test_image_command_adds_an_image_to_the_next_message(files, llm, tmp_path, capsys, monkeypatch):
    """llama-mtmd-cli's `/image FILE`: --image went with the first message only, and nothing added one later."""
    model, mmproj, _ = files
    red, blue = png((200, 30, 30)), png((20, 30, 220))
    (tmp_path / "red.png").write_bytes(red)
    (tmp_path / "blue.png").write_bytes(blue)
    (tmp_path / "bad.png").write_bytes(b"no")
    first = llm.chat([asking(red, "hi")], SAMPLE)[0].outputs[0].text
    history = [asking(red, "hi"), {"role": "assistant", "content": first}, asking(blue, "and this?")]
    second = llm.chat(history, SAMPLE)[0].outputs[0].text
    lines = [f"/image {tmp_path / 'bad.png'}", f"/image {tmp_path / 'red.png'}", "hi",
             f"/image {tmp_path / 'blue.png'}", "and this?"]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["run", str(model), *ARGS, "--mmproj", str(mmproj)]) == 1  # a line failed: the status says so
    out, err = capsys.readouterr()
    assert out == f"{first}\n{second}\n"
    assert f"hearth: error: /image {tmp_path / 'bad.png'}: not an image" in err
    assert f"{tmp_path / 'red.png'} image loaded" in err


def test_a_url_on_this_machine_is_fetched_for_run_and_llm_chat(files, llm, capsys, monkeypatch):
    """The user's own URL (--image, /image, LLM.chat) may name this machine: the server's default policy
    (loopback and private addresses refused, --allow-private-media-urls) refused it, and `hearth run` has
    no flag to change it. The server's requests are still refused (tests/api/test_vision_fetch.py)."""
    from tests.api.vision_fakes import ImageServer

    model, mmproj, _ = files
    data = png((90, 160, 20))
    want = llm.chat([asking(data, "hi")], SAMPLE)[0].outputs[0].text
    with ImageServer({"cat.png": data}) as server:
        url = server.url("cat.png")
        fetched = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                               {"type": "text", "text": "hi"}]}
        assert llm.chat([fetched], SAMPLE)[0].outputs[0].text == want
        assert main(["run", str(model), "hi", *ARGS, "--mmproj", str(mmproj), "--image", url]) == 0
        assert capsys.readouterr().out == want + "\n"
        monkeypatch.setattr("sys.stdin", io.StringIO(f"/image {url}\nhi\n"))
        assert main(["run", str(model), *ARGS, "--mmproj", str(mmproj)]) == 0
        out, err = capsys.readouterr()
        assert out == want + "\n" and f"{url} image loaded" in err


def test_image_command_without_a_projector_is_one_line(files, capsys, monkeypatch):
    model, _, _ = files
    monkeypatch.setattr("sys.stdin", io.StringIO("/image x.png\n"))
    assert main(["run", str(model), *ARGS]) == 1
    assert "/image needs the model's vision projector: run with --mmproj FILE" in capsys.readouterr().err


def test_llama_cpp_s_projector_flags_are_taken():
    """--no-mmproj-offload (llama-mtmd-cli's own help names it) and --no-mmproj were "unrecognized arguments";
    --no-mmproj with --mmproj asks two things: argparse's one line."""
    from hearth.cli import command_parser

    for command, argv in (("serve", ["m"]), ("run", ["m", "hi"])):
        parser = command_parser(command)
        args = parser.parse_intermixed_args([*argv, "--mmproj", "p.gguf", "--no-mmproj-offload"])
        assert args.mmproj == "p.gguf" and args.no_mmproj_offload
        assert parser.parse_intermixed_args([*argv, "--no-mmproj"]).mmproj == ""
        with pytest.raises(SystemExit):
            parser.parse_intermixed_args([*argv, "--mmproj", "p.gguf", "--no-mmproj"])
