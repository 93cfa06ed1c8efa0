"""Go's time durations, as Ollama reads a request's `keep_alive` (api.Duration) and OLLAMA_KEEP_ALIVE: "5m",
"1h30m", "250ms", or a number of seconds (300, 2.5, "300"); a negative one is forever (api.Duration turns it
into the longest duration there is), "0" and "-0s" are zero."""

from __future__ import annotations

import math
import re

FOREVER = math.inf
_LONGEST = 1e300
"""More seconds than this is forever (10**400 is no float: float() of it raised, a 500)."""

_SECONDS = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_DURATION = re.compile(f"({_SECONDS.pattern})(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def seconds(value: str | int | float) -> float:
    """The seconds `value` spells (FOREVER for a negative one); ValueError where it spells no duration."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, (int, float)):
        return FOREVER if value < 0 or value > _LONGEST else float(value)
    text = value.strip()
    negative = text.startswith("-")
    text = text.lstrip("+-")
    if _SECONDS.fullmatch(text):  # a bare number: seconds, as the JSON number (Go's parser takes only "0")
        total = float(text)
    else:
        parts = _DURATION.findall(text)
        if not parts or "".join(n + unit for n, unit in parts) != text:
            raise ValueError(value)
        total = sum(float(n) * _UNIT[unit] for n, unit in parts)
    return FOREVER if negative and total else total


def spelled(s: float) -> str:
    """A log line's duration: 300.0 -> "5m", 90 -> "1m30s", FOREVER -> "forever"."""
    if s == FOREVER:
        return "forever"
    minutes, rest = divmod(round(s, 3), 60)
    hours, minutes = divmod(int(minutes), 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{rest:g}s" if rest else "")
    return text or "0s"
