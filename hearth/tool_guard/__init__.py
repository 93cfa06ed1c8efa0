"""The tool-call reliability layer (issue 20): the call grammar (lazy in `auto`), validation and
safe coercion of calls against their schemas, the retry policy and its feedback messages, the
per-call confidence and the report. Pure decisions, no engine and no torch: hearth.api.guarded
runs the attempts, LLM.chat runs them offline.

The request-side parts (points 4-7), wired in by hearth.api.guard_extras and hearth.api.guarded:
- rescue_calls / rescue_parser: calls written without the format's markers, in guard mode;
- repeats: a call of the last step made again (guard mode: re-prompted once a request);
- workflow / nudge: hearth.workflow's rules, a broken one a problem answered by a nudge;
- compaction: hearth.compaction's tiers, before every render and re-prompt;
- tool_rank: BM25 ranking of many tools down to hearth.max_tools (the prompt and grammar hold only those);
- parallel_hint: guard mode's system sentence asking for one call per thing asked, in the format's delimiters;
- guard_event: what they did, as GuardReport.events."""

from __future__ import annotations

from hearth.tool_guard.checks import Checked, Problem, check_calls
from hearth.tool_guard.confidence import TokenTrace, call_spans
from hearth.tool_guard.feedback import retry_messages
from hearth.tool_guard.grammar import lazy_tool_grammar
from hearth.tool_guard.modes import DEFAULT_MODE, DEFAULT_RETRIES, MODES, GuardConfig, ToolGuardError, check_mode
from hearth.tool_guard.report import GuardReport, Retry
from hearth.tool_guard.triggers import Trigger, register, triggers_for
from hearth.tool_guard.validate import Coercion, Verdict, check_arguments

__all__ = ["Checked", "Coercion", "DEFAULT_MODE", "DEFAULT_RETRIES", "GuardConfig", "GuardReport", "MODES",
           "Problem", "Retry", "TokenTrace", "ToolGuardError", "Trigger", "Verdict", "call_spans", "check_arguments",
           "check_calls", "check_mode", "lazy_tool_grammar", "register", "retry_messages", "triggers_for"]
