"""GET /slots (llama-server's slot monitor): the engine's running requests as busy slots, the rest idle,
`?fail_on_no_slot`, `hearth serve --no-slots` a 501; and AsyncEngine.running_requests read from a real engine.
GET /slots was a 405 (only POST /slots/{id} existed), and --no-slots was taken as having nothing to turn off."""

from __future__ import annotations

from hearth.engine.async_engine import AsyncEngine, RunningRequest
from hearth.sampling_params import SamplingParams
from tests.gguf_factory import write_tiny_gguf
from tests.server.fakes import FakeEngine


class BusyEngine(FakeEngine):
    """A FakeEngine of 3 slots that runs `running` (what the scheduler runs now)."""

    def __init__(self, running: list[RunningRequest]):
        super().__init__(max_model_len=64)
        self.total_slots, self.running = 3, running

    def running_requests(self) -> list[RunningRequest]:
        return list(self.running)


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]  # FakeTokenizer's: one token a character


RUNNING = RunningRequest("chatcmpl-1", ids("hello there"), ids("ab\nc"),
                         SamplingParams(temperature=0.5, top_k=20, max_tokens=10, seed=3, stop=["x"]), 13, 4)


def test_running_requests_are_busy_slots_and_the_rest_idle(make_fake):
    fake = make_fake(engine=BusyEngine([RUNNING]))
    r = fake.client.get("/slots")
    assert r.status_code == 200, r.text
    busy, *idle = r.json()
    assert idle == [{"id": i, "n_ctx": 64, "speculative": False, "is_processing": False} for i in (1, 2)]
    assert {k: busy[k] for k in ("id", "n_ctx", "is_processing", "id_task", "prompt", "generated")} == {
        "id": 0, "n_ctx": 64, "is_processing": True, "id_task": "chatcmpl-1", "prompt": "hello there",
        "generated": "ab\nc"}
    assert (busy["n_prompt_tokens"], busy["n_prompt_tokens_processed"], busy["n_prompt_tokens_cache"]) == (11, 7, 4)
    assert busy["next_token"] == [{"has_next_token": True, "has_new_line": True, "n_remain": 6, "n_decoded": 4}]
    params = busy["params"]
    assert (params["n_predict"], params["temperature"], params["top_k"], params["seed"], params["stop"]) == \
        (10, 0.5, 20, 3, ["x"])
    assert fake.client.get("/slots?fail_on_no_slot=1").status_code == 200  # two are idle


def test_fail_on_no_slot_is_a_503_when_every_slot_is_busy(make_fake):
    fake = make_fake(engine=BusyEngine([RUNNING] * 3))
    assert [s["is_processing"] for s in fake.client.get("/slots").json()] == [True] * 3
    r = fake.client.get("/slots", params={"fail_on_no_slot": "1"})
    assert r.status_code == 503 and r.json()["error"]["message"] == "no slot available"


def test_no_slots_answers_501_as_llama_server(make_fake):
    from hearth.cli import command_parser
    from hearth.commands.serve import server_config

    args = command_parser("serve").parse_intermixed_args(["m", "--no-slots"])
    assert server_config(args).slots_endpoint is False
    assert server_config(command_parser("serve").parse_intermixed_args(["m"])).slots_endpoint is True
    fake = make_fake(engine=BusyEngine([]), slots_endpoint=False)
    r = fake.client.get("/slots")
    assert r.status_code == 501 and r.json()["error"]["code"] == 501
    assert "does not support slots endpoint" in r.json()["error"]["message"]


def test_a_real_engine_lists_what_its_scheduler_runs(tmp_path):
    from hearth.llm import LLM

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama")
    llm = LLM(str(path), max_model_len=128, progress=False)
    engine = AsyncEngine(llm.engine)  # not started: its core is stepped here
    assert engine.running_requests() == []
    llm.engine.add_request([1, 2, 3, 4], SamplingParams(max_tokens=8, temperature=0), request_id="r1")
    llm.engine.step()  # prefill and the first token
    llm.engine.step()
    (r,) = engine.running_requests()
    assert (r.request_id, r.prompt_token_ids, r.params.max_tokens) == ("r1", [1, 2, 3, 4], 8)
    assert len(r.output_token_ids) == 2 and r.num_computed_tokens == 5
