"""DNS rebinding (hearth.api.hosts): listening on a loopback address, a request must be sent to a loopback name or
address; a page whose own name was re-pointed at 127.0.0.1 sends `Host: evil.example:PORT` with no Origin (its GETs)
or a same-origin one (its POSTs), which CORS lets through."""

from __future__ import annotations

import socket

import pytest

from hearth.cli import command_parser
from hearth.commands.serve import server_config

CHAT = "/v1/chat/completions"
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
EVIL = {"Host": "evil.example:8080"}


@pytest.mark.parametrize("listen", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_a_loopback_server_refuses_a_rebound_name(make_fake, listen):
    fake = make_fake(listen_host=listen)
    for host in ("127.0.0.1:8080", "localhost:8080", "localhost", "[::1]:8080", "LocalHost:8080", "app.localhost:1",
                 "localhost.:8080", "0.0.0.0:8080", f"[{listen}]:8080" if ":" in listen else f"{listen}:8080",
                 "[::ffff:127.0.0.1]:8080", "192.168.1.5:8080", f"{socket.gethostname()}:8080"):  # addresses, its name
        assert fake.client.get("/v1/models", headers={"Host": host}).status_code == 200, host
    assert fake.client.get("/v1/models", headers={"Host": ""}).status_code == 200  # as none (Ollama's)
    assert fake.client.post(CHAT, json=BODY, headers={"Host": "localhost:8080"}).status_code == 200
    r = fake.client.get("/v1/models", headers=EVIL)
    assert r.status_code == 403, r.text
    error = r.json()["error"]  # OpenAI's shape, naming the Host and the flag that lets it in
    assert error["type"] == "permission_error" and "'evil.example:8080'" in error["message"]
    assert "--allowed-hosts evil.example" in error["message"]
    added = len(fake.engine.added)
    for headers in (EVIL, {**EVIL, "Origin": "http://evil.example:8080"}, {"Host": "localhost.evil.example"},
                    {"Host": "127.0.0.1.evil.example:8080"}, {"Host": "evil.example@localhost"},
                    {"Host": "localhost/.evil.example"}, {"Host": "localhost#.evil.example"}):  # no host[:port]
        r = fake.client.post(CHAT, json=BODY, headers=headers)
        assert r.status_code == 403 and "--allowed-hosts" in r.text, (headers, r.text)
    preflight = {"Origin": "http://evil.example:8080", "Access-Control-Request-Method": "POST"}
    assert fake.client.options(CHAT, headers={**EVIL, **preflight}).status_code == 403
    assert len(fake.engine.added) == added  # nothing generated for the rebound page
    assert fake.client.get("/api/tags", headers=EVIL).json()["error"].startswith("Host ")  # Ollama's shape there


def test_allowed_hosts_let_names_in(make_fake):
    fake = make_fake(listen_host="127.0.0.1", allowed_hosts=["evil.example", "llm.home.arpa:443"])
    assert fake.client.get("/v1/models", headers=EVIL).status_code == 200
    assert fake.client.post(CHAT, json=BODY, headers=EVIL).status_code == 200
    assert fake.client.get("/v1/models", headers={"Host": "LLM.home.arpa"}).status_code == 200  # any port, any case
    assert fake.client.get("/v1/models", headers={"Host": "other.example"}).status_code == 403
    under = make_fake(listen_host="127.0.0.1", allowed_hosts=["*.home.arpa"])  # was never matched: a silent 403
    for host, status in [("llm.home.arpa:8080", 200), ("a.b.Home.Arpa", 200), ("home.arpa", 403),
                         ("evilhome.arpa", 403), ("llm.home.arpa.evil.example", 403)]:
        assert under.client.get("/v1/models", headers={"Host": host}).status_code == status, host
    anyone = make_fake(listen_host="127.0.0.1", allowed_hosts=["*"])
    assert anyone.client.post(CHAT, json=BODY, headers=EVIL).status_code == 200


@pytest.mark.parametrize("listen", ["0.0.0.0", "::", "192.168.1.5", None])
def test_no_host_check_off_the_loopback(make_fake, listen):
    """Listening on every address or a LAN one the user chose the exposure, as Ollama (no check); an app no server
    of ours binds (None: in-process) has none either."""
    fake = make_fake(listen_host=listen)
    assert fake.client.get("/v1/models", headers=EVIL).status_code == 200
    assert fake.client.post(CHAT, json=BODY, headers={"Host": "chat.lan:8080"}).status_code == 200


def test_the_flags():
    args = command_parser("serve").parse_intermixed_args(["m", "--allowed-hosts", "a.example, b.example:8080,"])
    config = server_config(args, listen=True)
    assert (config.listen_host, config.allowed_hosts) == ("127.0.0.1", ["a.example", "b.example:8080"])
    assert server_config(args).listen_host is None  # driven in-process: not listening, no check
    args = command_parser("serve").parse_intermixed_args(["m", "--host", "0.0.0.0"])
    assert (server_config(args, listen=True).listen_host, server_config(args).allowed_hosts) == ("0.0.0.0", [])
