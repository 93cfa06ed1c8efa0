"""hearth's own log lines (the `hearth` logger and its children: hearth.api's "dropped to fit", the
loader's and backends' notes) on stderr at `--log-level`, in uvicorn's format. uvicorn configures only
its own loggers; without this, Python's last-resort handler printed hearth's warnings bare and its
info and debug lines never."""

from __future__ import annotations

import logging
import sys

from uvicorn.logging import DefaultFormatter

LOGGER = "hearth"


class _Stderr(logging.StreamHandler):
    """Writes to sys.stderr as it is when a line is written (a host may swap it: pytest's capture)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _):
        pass


def configure_logging(level: str) -> logging.Handler:
    """One stderr handler on the `hearth` logger at `level` (critical ... debug), replacing one an
    earlier call added; the records still propagate, so a host's root handlers (pytest's) see them."""
    logger = logging.getLogger(LOGGER)
    for old in [h for h in logger.handlers if getattr(h, "hearth_serve", False)]:
        logger.removeHandler(old)
    handler = _Stderr()
    handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s"))
    handler.hearth_serve = True
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    return handler
