"""A stop string that spans streamed chunks, on a real tiny model (tests/gguf_factory.py) in process, read by
the official SDKs' stream helpers: the engine holds back what could begin it, so no chunk shows any of it,
and the answer ends as each vendor says a stop string ends one (OpenAI finish_reason "stop", Anthropic
stop_reason "stop_sequence" naming it)."""

from __future__ import annotations

import anthropic
import openai
import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from tests.gguf_factory import write_tiny_gguf
from tests.server.fakes import CHATML_NO_TOOLS

HI = [{"role": "user", "content": "hi"}]
GREEDY = {"max_tokens": 12, "temperature": 0}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_tiny_gguf(path, "qwen2", context=1024, tied=False, chat_template=CHATML_NO_TOOLS)
    llm = LLM(str(path), max_model_len=256, max_num_batched_tokens=64, progress=False)
    with TestClient(create_app(ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine)))) as c:
        yield c


@pytest.fixture(scope="module")
def sdks(client):
    return (openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=client, max_retries=0),
            anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=client, max_retries=0))


def _chat_deltas(oa, **kw) -> tuple[list[str], object]:
    with oa.chat.completions.stream(model="tiny", messages=HI, **GREEDY, **kw) as s:
        events = list(s)
        last = [e.chunk for e in events if e.type == "chunk" and e.chunk.choices][-1]
        return [e.delta for e in events if e.type == "content.delta" and e.delta], last.choices[0]


@pytest.fixture(scope="module")
def spanning(sdks) -> tuple[str, str]:
    """(a stop string across a chunk boundary of the greedy answer, its first place there; the text before it)."""
    pieces, _ = _chat_deltas(sdks[0])
    text = "".join(pieces)
    for k in range(2, len(pieces) - 1):  # some text before it
        at = len("".join(pieces[:k])) - 1  # the last character of chunk k-1, then two more
        stop = text[at:at + 3]
        if len(stop) == 3 and text.find(stop) == at:
            return stop, text[:at]
    pytest.fail(f"no stop string spans chunks of {pieces!r}")


def test_chat_stream_stops_before_a_string_spanning_chunks(sdks, spanning):
    stop, before = spanning
    with sdks[0].chat.completions.stream(model="tiny", messages=HI, stop=[stop], **GREEDY) as s:
        events = list(s)
        final = s.get_final_completion()
    deltas = [e.delta for e in events if e.type == "content.delta"]
    assert "".join(deltas) == final.choices[0].message.content == before and final.choices[0].finish_reason == "stop"
    last = [e.chunk.choices[0] for e in events if e.type == "chunk" and e.chunk.choices][-1]
    assert last.model_extra["stop_reason"] == stop  # vLLM's field: which stop string ended it


def test_completions_stream_stops_the_same(sdks, spanning):
    stop, before = spanning
    chunks = list(sdks[0].completions.create(model="tiny", prompt="<|im_start|>user\nhi<|im_end|>\n<|im_start|>"
                                             "assistant\n", stop=stop, stream=True, **GREEDY))
    assert "".join(c.choices[0].text for c in chunks) == before and chunks[-1].choices[0].finish_reason == "stop"


def test_messages_stream_says_stop_sequence(sdks, spanning):
    stop, before = spanning
    with sdks[1].messages.stream(model="tiny", messages=HI, stop_sequences=[stop], max_tokens=12,
                                 extra_body={"temperature": 0}) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == final.content[0].text == before
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
