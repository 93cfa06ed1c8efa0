"""The chat page behind a proxy that serves hearth under a prefix (--root-path, the ASGI root_path): its
HTML and scripts name no absolute path, and what they name resolves under the prefix."""

from __future__ import annotations

import re
from urllib.parse import urljoin

from starlette.testclient import TestClient

from hearth.api.chat_page import ASSETS, STATIC
from tests.server.fakes import fake_app

# src="...", href="..." in the HTML; fetch("...") and import ... from "..." in the scripts
URLS = re.compile(r'(?:src|href)="([^"]*)"|fetch\(\s*"([^"]*)"|from\s+"([^"]*)"')


def urls(text: str) -> list[str]:
    return [next(u for u in m.groups() if u is not None) for m in URLS.finditer(text)]


def test_the_page_names_no_absolute_path():
    for name in ["index.html", *sorted(n for n in ASSETS if n.endswith(".js"))]:
        absolute = [u for u in urls((STATIC / name).read_text()) if u.startswith("/")]
        assert not absolute, f"{name}: {absolute} would leave a proxy's prefix"


def test_the_page_and_its_assets_resolve_under_the_root_path():
    app, _ = fake_app()
    with TestClient(app, root_path="/llm") as client:
        page = client.get("/llm/")
        assert page.status_code == 200 and '<base href="/llm/">' in page.text
        found = [u for u in urls(page.text) if not u.startswith(("http:", "https:", "#"))]
        assert {"/llm/static/app.js", "/llm/static/style.css", "/llm/favicon.ico"} <= {urljoin("/llm/", u) for u in found}
        for u in found:
            assert client.get(urljoin("/llm/", u)).status_code == 200, u
        assert client.get(urljoin("/llm/", "v1/models")).status_code == 200  # app.js' fetch, from the base
    with TestClient(fake_app()[0]) as client:
        assert '<base href="/">' in client.get("/").text


def test_behind_a_root_path_the_routes_keep_their_own_path():
    """--root-path put the prefix in front of every path the guards and error shapes read (uvicorn's scope: path
    /llm/health, root_path /llm): /health wanted the API key, Ollama's errors came back in OpenAI's shape, a 404
    named /llm/llm/..."""
    app, _ = fake_app(api_key="k")
    with TestClient(app, root_path="/llm") as client:
        assert client.get("/llm/health").status_code == 200
        assert client.get("/llm/v1/models").status_code == 401
        keyed = {"Authorization": "Bearer k"}
        assert client.get("/llm/v1/models", headers=keyed).status_code == 200
        bad = client.post("/llm/api/generate", json={"model": "fake-model", "prompt": "hi", "keep_alive": "zz"},
                          headers=keyed)
        assert bad.status_code == 400 and isinstance(bad.json()["error"], str), bad.text  # Ollama's shape
        missing = client.get("/llm/v1/nope", headers=keyed)
        assert missing.status_code == 404 and "no route GET /v1/nope" in missing.text
