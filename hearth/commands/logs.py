"""hearth's own log lines (the `hearth` logger and its children: hearth.api's "dropped to fit", the
loader's and backends' notes) on stderr. hearth.cli sets them up once for every command as its other lines
read (`hearth: warning: ...`); a server (serve, cluster, run-batch) writes them at `--log-level` in uvicorn's
format, beside uvicorn's own. uvicorn configures only its own loggers; without this, Python's last-resort
handler printed hearth's warnings bare and its info and debug lines never. The format says who is talking, so
no message starts `hearth: ` itself (tests/test_log_lines.py): `WARNING:  ...` in a server's log, as uvicorn's."""

from __future__ import annotations

import logging
import sys

LOGGER = "hearth"


class _Stderr(logging.StreamHandler):
    """Writes to sys.stderr as it is when a line is written (a host may swap it: pytest's capture)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _):
        pass


class TerminalFormatter(logging.Formatter):
    """`hearth: warning: ...` (`hearth: ...` below warning), as hearth.cli writes its own lines."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        level = f"{record.levelname.lower()}: " if record.levelno >= logging.WARNING else ""
        return f"hearth: {level}{text}"


def _uvicorn_formatter() -> logging.Formatter:
    from uvicorn.logging import DefaultFormatter  # here: a command that serves nothing need not import uvicorn

    return DefaultFormatter("%(levelprefix)s %(message)s")


def configure_logging(level: str, terminal: bool = False) -> logging.Handler:
    """One stderr handler on the `hearth` logger at `level` (critical ... debug), replacing one an
    earlier call added; the records still propagate, so a host's root handlers (pytest's) see them.
    terminal: hearth.cli's line format (TerminalFormatter), else uvicorn's, as a server's log reads."""
    logger = logging.getLogger(LOGGER)
    for old in [h for h in logger.handlers if getattr(h, "hearth_serve", False)]:
        logger.removeHandler(old)
    handler = _Stderr()
    handler.setFormatter(TerminalFormatter() if terminal else _uvicorn_formatter())
    handler.hearth_serve = True
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    return handler
