"""The switch: which tool layer a request gets. `off` is the parse-only server of before; `grammar`
adds the call grammar (lazy in `auto`); `guard` adds validation, safe coercion and retries."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.errors import HearthError
from hearth.tool_guard.declined import NAME_FLOOR

MODES = ("guard", "grammar", "off")
DEFAULT_MODE = "guard"
DEFAULT_RETRIES = 3


class ToolGuardError(HearthError):
    """An unknown mode or a bad retry count."""


def check_mode(value: object, where: str = "tool_guard") -> str:
    if value not in MODES:
        raise ToolGuardError(f"{where}: unknown mode {value!r}; modes: {', '.join(MODES)}")
    return value


def decline_below_error(value: object) -> str | None:
    """What is wrong with a decline floor (None: a number in [0, 1])."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        return f"must be a number in [0, 1], got {value!r}"
    return None


@dataclass(frozen=True, slots=True)
class GuardConfig:
    mode: str = DEFAULT_MODE
    max_retries: int = DEFAULT_RETRIES
    decline_below: float = NAME_FLOOR
    """A lazily triggered call whose name's first token had a raw probability below this is declined
    (hearth.tool_guard.declined); 0 declines none."""
    parallel_hint: bool = False
    """Mode guard: add the one-call-per-thing sentence to the system message where parallel calls are
    allowed (hearth.tool_guard.parallel_hint). Off by default: measured 2026-12-06 it won BFCL's
    parallel items for Qwen2.5-Coder-1.5B and lost irrelevance and multiple items for the 0.5B."""

    def __post_init__(self) -> None:
        check_mode(self.mode, "--tool-guard")
        if not 0 <= self.max_retries <= 10:
            raise ToolGuardError(f"--tool-guard-retries: must be in [0, 10], got {self.max_retries}")
        if (why := decline_below_error(self.decline_below)) is not None:
            raise ToolGuardError(f"--tool-guard-decline-below: {why}")

    @property
    def grammar(self) -> bool:
        return self.mode in ("grammar", "guard")

    @property
    def retries(self) -> int:
        """Retries a request may spend: only the guard retries."""
        return self.max_retries if self.mode == "guard" else 0
