"""How `hearth serve` listens, in llama-server's and vLLM's flags: more API keys from a file, HTTPS, the path prefix
behind a proxy, a timeout for a client that stalls, uvicorn's access log and the OpenAPI schema."""

from __future__ import annotations

import argparse
from pathlib import Path

from hearth.errors import HearthError


def add_listen_flags(net) -> None:
    net.add_argument("--api-key-file", default=None, metavar="FILE",
                     help="llama-server's: more API keys, one a line (blank lines and lines starting with # are "
                          "skipped); each is taken as --api-key is")
    net.add_argument("--ssl-keyfile", "--ssl-key-file", default=None, metavar="FILE",
                     help="serve HTTPS with this PEM private key, with --ssl-certfile (vLLM's spelling; "
                          "--ssl-key-file: llama-server's)")
    net.add_argument("--ssl-certfile", "--ssl-cert-file", default=None, metavar="FILE",
                     help="the PEM certificate for --ssl-keyfile (--ssl-cert-file: llama-server's spelling)")
    net.add_argument("--root-path", default="", metavar="PATH", type=_root_path,
                     help="vLLM's: the path prefix a proxy serves hearth under (ASGI root_path), e.g. /llm")
    net.add_argument("--timeout", "-to", type=float, default=0, metavar="SECONDS",
                     help="llama-server's read/write timeout: a client that sends none of the rest of its request, "
                          "or reads none of the answer once its connection's buffers are full, for SECONDS is dropped "
                          "(its request not run, or aborted and its KV freed); 0: never (default: %(default)s; "
                          "llama-server's is 600)")
    net.add_argument("--disable-uvicorn-access-log", action="store_true",
                     help="vLLM's: no log line per HTTP request")
    net.add_argument("--disable-fastapi-docs", action="store_true",
                     help="vLLM's: no /openapi.json (hearth serves no /docs or /redoc pages anyway)")


def _root_path(text: str) -> str:
    """--root-path as a URL path: /llm (a trailing slash dropped); `llm` made the banner read :8080llm."""
    if text and not text.startswith("/"):
        raise argparse.ArgumentTypeError(f"{text!r} is no URL path: give it with its leading slash, /{text}")
    return text.rstrip("/")


def api_keys(args: argparse.Namespace) -> list[str]:
    """--api-key-file's keys, as llama-server reads the file (one a line; blank lines and # comments skipped)."""
    path = getattr(args, "api_key_file", None)
    if path is None:
        return []
    try:
        lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise HearthError(f"--api-key-file {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    keys = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    if not keys:
        raise HearthError(f"--api-key-file {path}: has no key (one a line)")
    return keys


def uvicorn_options(args: argparse.Namespace) -> dict:
    """uvicorn.Config's keywords from the flags: HTTPS (both files or neither), root_path, the access log."""
    key, cert = args.ssl_keyfile, args.ssl_certfile
    if (key is None) != (cert is None):
        given, missing = ("--ssl-keyfile", "--ssl-certfile") if key else ("--ssl-certfile", "--ssl-keyfile")
        raise HearthError(f"{given} needs {missing} too: HTTPS takes a private key and its certificate")
    for flag, path in (("--ssl-keyfile", key), ("--ssl-certfile", cert)):
        if path is not None and not Path(path).expanduser().is_file():
            raise HearthError(f"{flag} {path}: no such file")
    ssl = {"ssl_keyfile": str(Path(key).expanduser()), "ssl_certfile": str(Path(cert).expanduser())} if key else {}
    return {**ssl, "root_path": args.root_path, "access_log": not args.disable_uvicorn_access_log}


def scheme(args: argparse.Namespace) -> str:
    return "https" if getattr(args, "ssl_keyfile", None) else "http"
