"""A streamed answer's lines stay whole for readers that split them as str.splitlines does: httpx's
iter_lines, which the `ollama` client reads NDJSON with and many SSE readers use, also breaks at U+2028,
U+2029 and U+0085, which JSON may leave raw in a string. A model wrote one of them (a tiny random model
in tests/server/test_stress.py did) and the ollama client failed with a JSONDecodeError mid-answer."""

from __future__ import annotations

import asyncio
import json

import httpx
import ollama
import pytest

TEXT = "one\u2028two\u2029three\x85four"  # tests/server/fakes.py's script line_breaks
ASK = [{"role": "user", "content": "script:line_breaks"}]


def test_the_ollama_client_reads_a_streamed_answer_with_line_separators(fake):
    async def run():
        client = ollama.AsyncClient(host="http://testserver", transport=httpx.ASGITransport(fake.client.app))
        chat = [p.message.content async for p in await client.chat(model="fake-model", messages=ASK, stream=True)]
        made = [p.response async for p in await client.generate(model="fake-model", prompt="script:line_breaks",
                                                                stream=True)]
        return "".join(chat), "".join(made)

    assert asyncio.run(run()) == (TEXT, TEXT)


@pytest.mark.parametrize("path,body,text", [
    ("/v1/chat/completions", {"messages": ASK}, lambda e: e["choices"][0]["delta"].get("content") or ""),
    ("/v1/completions", {"prompt": "script:line_breaks"}, lambda e: e["choices"][0]["text"]),
    ("/v1/messages", {"messages": ASK, "max_tokens": 50}, lambda e: e.get("delta", {}).get("text", "")),
])
def test_each_sse_data_line_is_whole_json_when_split_as_splitlines_does(fake, path, body, text):
    with fake.client.stream("POST", path, json={"model": "fake-model", "stream": True, **body}) as r:
        data = [line[5:].strip() for line in r.iter_lines() if line.startswith("data:")]
    events = [json.loads(d) for d in data if d != "[DONE]"]
    assert "".join(text(e) for e in events) == TEXT
