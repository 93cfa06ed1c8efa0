"""The FastAPI app: the served models (a ModelPool: one AsyncEngine per loaded model, owned by the
lifespan), the OpenAI and Anthropic routes, llama-server's /infill and /completion, Ollama's /api/..., /health, /metrics,
the chat page at `/`; auth, CORS and a body-size limit around all of it."""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from hearth.api import (anthropic_routes, chat_page, completion_routes, embeddings, infill_routes, llama_embedding,
                        lora_routes, ollama_embed, ollama_models, ollama_routes, openai_chat, openai_completions,
                        openai_routes, props, rerank_routes, responses_routes, slots, slots_monitor)
from hearth.api.cors import Cors
from hearth.api.errors import install_handlers
from hearth.api.hosts import HostCheckMiddleware, host_check_on
from hearth.api.embeddings_only import refusing
from hearth.api.guards import APIKeyMiddleware, BodyLimitMiddleware, StallTimeoutMiddleware
from hearth.api.ignored_fields import HEADER as IGNORED_HEADER, IgnoredFieldsMiddleware
from hearth.api.json_body import JSONBodyMiddleware
from hearth.api.json_values import JSONValuesMiddleware
from hearth.api.metrics import CONTENT_TYPE, Metrics
from hearth.api.model_pool import ModelPool
from hearth.api.responses_background import stop_all
from hearth.api.responses_store import ResponseStore
from hearth.api.sampling import Limits
from hearth.api.served import ServedModel
from hearth.tool_guard import GuardConfig
from hearth.tool_guard.routing import DEFAULT_THRESHOLD, TOOL_FLOOR

GENERATING = (openai_chat, openai_completions, responses_routes, anthropic_routes, infill_routes, completion_routes)
"""The route modules that generate text: llama-server's --embedding refuses them (ollama_routes refuses in its routes:
their load and unload requests answer)."""


@dataclass
class ServerConfig:
    api_key: str | None = None
    """Required on every route but /health and the chat page (Bearer or x-api-key)."""
    api_keys: list[str] = field(default_factory=list)
    """More keys, each taken as api_key is (llama-server's --api-key-file)."""
    cors_origins: list[str] = field(default_factory=list)
    """Origins allowed by CORS besides the local ones (hearth.api.cors.LOCAL_ORIGINS); ["*"] allows any."""
    listen_host: str | None = None
    """The address `hearth serve` listens on: at a loopback one, a request must name a loopback host or one of
    allowed_hosts (hearth.api.hosts: DNS rebinding). None: an app no server of ours binds, no Host check."""
    allowed_hosts: list[str] = field(default_factory=list)
    """Host names let in besides the loopback ones when listening on a loopback address; ["*"]: any."""
    max_body_bytes: int = 32 * 2**20
    max_n: int = 16
    max_tokens: int = 0
    """Largest max_tokens a request may ask for, and one's that asks none; 0 = the context length."""
    sampling_defaults: dict[str, float] = field(default_factory=dict)
    """hearth.api.sampling.Limits.defaults: sampling a request that omits a field gets (hearth serve --temp ...)."""
    max_stored_responses: int = 1000
    """Responses kept for previous_response_id and GET /v1/responses/{id}; the oldest go first."""
    stored_response_max_age_s: float = 3600.0
    tool_guard: GuardConfig = field(default_factory=GuardConfig)
    """The tool layer of requests that do not pick one (hearth.tool_guard)."""
    router_threshold: float = DEFAULT_THRESHOLD
    """A router's threshold where neither the request nor its model's router gives one."""
    router_tool_floor: float = TOOL_FLOOR
    """A router's tool floor where neither the request nor its model's router gives one (0: off)."""
    build_info: str = "hearth"
    """What GET /props reports as llama-server's build_info (`hearth serve` gives its version)."""
    webui: bool = True
    """Serve the chat page at / (llama-server's --no-webui: an API-only server answers / with a 404)."""
    timeout_s: float = 0
    """A client that sends none of its request, or reads none of the answer, this long is dropped (llama-server's
    --timeout); 0: never."""
    openapi: bool = True
    """Serve /openapi.json (vLLM's --disable-fastapi-docs: not)."""
    embeddings_only: bool = False
    """llama-server's --embedding: the generating routes answer 501 (hearth.api.embeddings_only)."""
    slots_endpoint: bool = True
    """GET /slots answers (llama-server's --no-slots: a 501; hearth.api.slots_monitor)."""


def create_app(models: ServedModel | ModelPool, config: ServerConfig | None = None) -> FastAPI:
    """`models`: one loaded model, or a pool that loads and unloads several."""
    config = config or ServerConfig()
    pool = models if isinstance(models, ModelPool) else ModelPool.single(models)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await pool.start()
        try:
            yield
        finally:
            await stop_all(app.state.background)  # background responses still running end cancelled
            await pool.close()

    app = FastAPI(title="hearth", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json" if config.openapi else None)
    app.state.models = pool
    app.state.config = config
    app.state.limits = Limits(config.max_n, config.max_tokens, dict(config.sampling_defaults))
    app.state.metrics = Metrics(pool.loaded)
    app.state.responses = ResponseStore(config.max_stored_responses, config.stored_response_max_age_s)
    app.state.background = set()  # the background responses' tasks not yet ended (hearth.api.responses_background)
    install_handlers(app)
    webui = config.webui and not config.embeddings_only  # a chat page that cannot chat is none
    app.state.webui = webui
    app.state.slots_endpoint = config.slots_endpoint
    for module in (openai_routes, embeddings, llama_embedding, rerank_routes, slots, slots_monitor, props, lora_routes,
                   ollama_embed, ollama_models, ollama_routes, *([chat_page] if webui else [])):
        app.include_router(module.router)
    for module in GENERATING:
        app.include_router(refusing(module.router) if config.embeddings_only else module.router)
    if not webui:  # GET / without the chat page: Ollama's heartbeat text, as its HEAD / (ollama_models)
        app.add_api_route("/", _running, methods=["GET"], response_class=PlainTextResponse)
    _add_service_routes(app)
    # added innermost first: CORS answers preflights before auth, the body limit runs after auth
    app.add_middleware(IgnoredFieldsMiddleware)
    app.add_middleware(JSONBodyMiddleware)
    app.add_middleware(JSONValuesMiddleware)  # NaN, 1e400, a lone surrogate: a 400 naming the field
    app.add_middleware(BodyLimitMiddleware, max_bytes=config.max_body_bytes)
    keys = [k for k in (config.api_key, *config.api_keys) if k]
    if keys:
        app.add_middleware(APIKeyMiddleware, keys=keys)
    app.add_middleware(Cors, origins=config.cors_origins,  # local pages by default, as Ollama's (hearth.api.cors)
                       expose_headers=[IGNORED_HEADER, "Retry-After", "x-should-retry"])  # SDKs in a browser read them
    if config.timeout_s:  # the other middlewares' reads and writes are timed too
        app.add_middleware(StallTimeoutMiddleware, seconds=config.timeout_s)
    if host_check_on(config.listen_host, config.allowed_hosts):  # before CORS: a rebound page's preflight too
        app.add_middleware(HostCheckMiddleware, listen=config.listen_host, allowed=config.allowed_hosts)
    app.add_middleware(RoutePathMiddleware)  # outermost: every check below reads the route's own path
    return app


class RoutePathMiddleware:
    """--root-path (vLLM's; ASGI's root_path): uvicorn puts it in front of every request's path, while the key
    guard's public routes, the error shapes (Ollama's, Anthropic's, llama-server's by path) and the logs match
    routes by their own path; so it comes off the path here, once. Routing and the chat page's <base> read
    root_path itself."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        root = scope.get("root_path", "")
        if root and scope["type"] == "http" and scope["path"].startswith(root + "/"):
            scope = dict(scope, path=scope["path"][len(root):])
        await self.app(scope, receive, send)


async def _running() -> str:
    return "hearth is running"


def _add_service_routes(app: FastAPI) -> None:
    @app.api_route("/health", methods=["GET", "HEAD"])  # HEAD: load balancers' and uptime checkers' probe
    @app.api_route("/v1/health", methods=["GET", "HEAD"], include_in_schema=False)  # llama-server's too
    async def health():
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics(request: Request):
        for served in request.app.state.models.loaded():
            refresh = getattr(served.engine, "refresh_stats", None)
            if refresh is not None:  # a cluster asks its replicas now, not at its last health poll
                await refresh()
        return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE)
