"""Errors as the wires spell them: OpenAI `{"error": {message, type, param, code}}`, Anthropic
`{"type": "error", "error": {type, message}}`, llama-server `{"error": {code, message, type}}` (code:
the HTTP status; hearth adds `param`) and Ollama `{"error": message}`, chosen by the route
(`/v1/messages...` speaks Anthropic, `/infill` and `/completion(s)` llama-server, `/api/...` Ollama).
Every handler here turns a failure into one of those bodies; a malformed model output never reaches
them (the output parsers fall back to plain text)."""

from __future__ import annotations

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from hearth.api.llama_names import LLAMA_WIRE_NAMES
from hearth.api.unserved import unserved
from hearth.engine.async_engine import EngineFullError, EngineShutdownError, EngineStepError
from hearth.engine.engine_core import MediaEncodeError
from hearth.errors import HearthError, MaxTokensTooLargeError, PromptTooLongError
from hearth.sample.grammar import InvalidStructuredOutput
from hearth.sampling_params import InvalidSamplingParams

log = logging.getLogger("hearth.api")

# HTTP status -> (OpenAI error type, Anthropic error type)
_TYPES = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("authentication_error", "authentication_error"),
    403: ("permission_error", "permission_error"),
    404: ("not_found_error", "not_found_error"),
    405: ("invalid_request_error", "invalid_request_error"),
    408: ("invalid_request_error", "timeout_error"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_exceeded", "rate_limit_error"),
    500: ("server_error", "api_error"),
    501: ("not_supported_error", "api_error"),  # llama-server's type for it
    503: ("server_error", "overloaded_error"),
}


RETRY_AFTER_S = 1
"""`Retry-After` of a full queue (429) and of a model whose room is held (503 model_busy): the server
knows no finish time for the requests in the way, and a model_busy request already waited
ModelPool.busy_wait_s on the server, which takes the room the moment it frees, so a prompt retry loses nothing."""


class APIError(Exception):
    """An error to answer with; `param` names the request field at fault (OpenAI's `param`).
    `retry_after`: seconds for the `Retry-After` header of a retryable 429/503 (the SDKs wait that
    long, not their own backoff); `permanent`: a 5xx that no retry fixes, sent with
    `x-should-retry: false` (the openai and anthropic SDKs then do not retry it)."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 retry_after: int | None = None, permanent: bool = False):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.retry_after, self.permanent = retry_after, permanent

    def headers(self) -> dict[str, str] | None:
        h = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
        if self.permanent:
            h["x-should-retry"] = "false"
        return h or None


def is_anthropic(path: str) -> bool:
    return path.startswith("/v1/messages")


def is_ollama(path: str) -> bool:
    """Ollama's native API (hearth.api.ollama_routes): its errors are `{"error": "..."}`."""
    return path.startswith("/api/")


LLAMA_ROUTES = ("/infill", "/completion", "/completions", "/props", "/embedding", "/embeddings", "/slots")
"""Routes that speak llama-server's wire (format_error_response in tools/server/server-common.cpp)."""


def error_body(path: str, status: int, message: str, param: str | None = None,
               code: str | None = None) -> dict:
    openai_type, anthropic_type = _TYPES.get(status, _TYPES[400] if status < 500 else _TYPES[500])
    if is_anthropic(path):
        return {"type": "error", "error": {"type": anthropic_type, "message": message}}
    if is_ollama(path):  # one string: the field at fault goes in it, where the message does not name it
        return {"error": message if not param or message.startswith(param) else f"{param}: {message}"}
    if path in LLAMA_ROUTES:
        return {"error": {"code": status, "message": message, "type": openai_type, "param": param}}
    return {"error": {"message": message, "type": openai_type, "param": param, "code": code}}


def error_response(path: str, status: int, message: str, param: str | None = None,
                   code: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(path, status, message, param, code), status_code=status, headers=headers)


OLLAMA_OPTIONS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                  "typical_p": "typical_p", "seed": "seed",
                  "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
                  "repeat_penalty": "repetition_penalty", "repeat_last_n": "repeat_last_n",
                  "mirostat": "mirostat", "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta",
                  "num_predict": "max_tokens", "stop": "stop"}
"""Ollama's `options` hearth applies -> their SamplingParams fields (hearth.api.ollama_options reads them)."""
_PROMPT_FIELD = {"/v1/completions": "prompt", "/v1/responses": "input", "/v1/embeddings": "input",
                 "/api/generate": "prompt",
                 **dict.fromkeys(LLAMA_ROUTES, "prompt")}
"""The request field that holds the prompt, per route (elsewhere: messages)."""
_SCHEMA_FIELD = {"/v1/chat/completions": "response_format.json_schema.schema",
                 "/v1/messages": "output_config.format.schema", "/v1/responses": "text.format.schema",
                 "/api/chat": "format", "/api/generate": "format"}
"""The request field that holds a structured-output JSON schema, per route."""
_WIRE_NAMES = {"/v1/completions": {"prompt_logprobs": "logprobs"},  # echo asks the prompt's by logprobs
               **dict.fromkeys(LLAMA_ROUTES, LLAMA_WIRE_NAMES),
               "/v1/chat/completions": {"logprobs": "top_logprobs"},
               **dict.fromkeys(("/api/chat", "/api/generate"),
                               {field: f"options.{name}" for name, field in OLLAMA_OPTIONS.items()})}
"""SamplingParams fields the engine checks (check_request) by their name on a route's wire."""


def from_hearth_error(e: HearthError, path: str = "") -> APIError:
    """The API status of an error the engine raised about a request on route `path`."""
    if isinstance(e, EngineFullError):
        return APIError(429, str(e), code="queue_full", retry_after=RETRY_AFTER_S)
    if isinstance(e, EngineShutdownError):
        return APIError(503, str(e), code="server_shutting_down")
    if isinstance(e, (EngineStepError, MediaEncodeError)):
        return APIError(500, str(e), code="engine_error")
    if isinstance(e, MaxTokensTooLargeError):
        return APIError(400, str(e), param=e.field, code="context_length_exceeded")
    if isinstance(e, PromptTooLongError):
        return APIError(400, str(e), param=_PROMPT_FIELD.get(path, "messages"), code="context_length_exceeded")
    if isinstance(e, InvalidStructuredOutput) and e.kind == "json_schema" and path in _SCHEMA_FIELD:
        return APIError(400, f"{_SCHEMA_FIELD[path]}: {e}", param=_SCHEMA_FIELD[path])
    if isinstance(e, InvalidStructuredOutput) and e.kind == "tools":  # the tool layer's own grammar
        return APIError(400, f"tools: {e}", param="tools")
    if isinstance(e, InvalidSamplingParams):
        param = _WIRE_NAMES.get(path, {}).get(e.field, e.field)
        return APIError(400, f"{param}: {e.why}", param=param)
    return APIError(400, str(e))


_TYPE_NAMES = {"str", "int", "float", "bool", "none", "list", "dict", "json-or-python", "is-instance"}


def _loc_to_param(loc: tuple) -> str:
    """("body", "messages", 0, "role") -> "messages[0].role"; union branches (`str`, `list[str]`)
    are pydantic's, not the request's, and are left out."""
    out = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.split("[")[0] in _TYPE_NAMES or "[" in part or part.startswith("function-"):
            continue
        else:
            out += ("." if out else "") + part
    return out


EMPTY_BODY = "the request body is empty; it must be a JSON object"
_JSON_SPACE = " \t\n\r"  # JSON's whitespace (RFC 8259); str.strip() would take more

_NOT_AN_OBJECT = {"model_attributes_type", "model_type", "dict_type"}
"""pydantic's error types for a body that is no JSON object (`[1]` is a list, `"hi"` a string)."""


def validation_message(errors: list, body: object = None) -> tuple[str, str | None]:
    """One line for pydantic's errors: the first one, with the field it is about (a union's
    branches joined: "stop: Input should be a valid string or a valid list"). `body` is the text
    FastAPI failed to parse as JSON, when that was the error."""
    if not errors:
        return "invalid request", None
    first = errors[0]
    if first.get("type") == "json_invalid" and isinstance(body, str) and not body.strip(_JSON_SPACE):
        return EMPTY_BODY, None  # only whitespace: as empty as no body at all, not "Expecting value"
    if first.get("type") == "json_invalid":
        return f"malformed JSON body: {first.get('ctx', {}).get('error', first.get('msg'))}", None
    param = _loc_to_param(tuple(first.get("loc", ())))
    same = [e["msg"].removeprefix("Value error, ") for e in errors  # a validator's own words, without pydantic's tag
            if _loc_to_param(tuple(e.get("loc", ()))) == param]
    why = " or ".join([same[0]] + [m.removeprefix("Input should be ") for m in same[1:]])
    if not param and first.get("type") in _NOT_AN_OBJECT:
        return "the request body must be a JSON object", None
    if not param and first.get("type") == "missing":  # FastAPI's word for no body at all ("Field required")
        return EMPTY_BODY, None
    if not param:
        return f"request body: {why}", None
    return f"{param}: {why}", param


STALLED = "hearth.stalled"
"""Scope key: {"seconds": S} once the client sent none of its body for S seconds (hearth.api.guards'
StallTimeoutMiddleware)."""
BODY_PARSE_ERROR = "There was an error parsing the body"
"""FastAPI's 400 for a body it could not read, whatever the cause."""


def _unread_body(request: Request, e: Exception) -> JSONResponse:
    """A body that stalled past --timeout (408, as llama-server's HTTP library answers) or nests too deep for
    Python's JSON reader (a RecursionError), each named; else FastAPI's 400."""
    path = request.url.path
    if stalled := request.scope.get(STALLED):
        return error_response(path, 408, f"the client sent none of its request body for {stalled['seconds']:g} s "
                                         "(the server's --timeout); send the whole body at once", code="timeout")
    if isinstance(e.__cause__, RecursionError):
        return error_response(path, 400, "the JSON body nests arrays or objects too deep to be read "
                                         "(a request needs a few levels; this one has hundreds or more)")
    return error_response(path, 400, BODY_PARSE_ERROR)


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, e: APIError):
        return error_response(request.url.path, e.status, e.message, e.param, e.code, e.headers())

    @app.exception_handler(HearthError)
    async def _hearth_error(request: Request, e: HearthError):
        return await _api_error(request, from_hearth_error(e, request.url.path))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, e: RequestValidationError):
        message, param = validation_message(list(e.errors()), e.body)
        return error_response(request.url.path, 400, message, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException):
        message = e.detail if isinstance(e.detail, str) else HTTPStatus(e.status_code).phrase
        if e.status_code == 404 and message == "Not Found":
            why = unserved(request.url.path)
            message = f"no route {request.method} {request.url.path}" + (f": {why}" if why else "")
        if e.status_code == 400 and message == BODY_PARSE_ERROR:  # FastAPI's words for any failed read: say which
            return _unread_body(request, e)
        return error_response(request.url.path, e.status_code, message, headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, e: Exception):
        log.exception("unhandled error on %s", request.url.path)
        return error_response(request.url.path, 500, f"internal error: {type(e).__name__}: {e}")
