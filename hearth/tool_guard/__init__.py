"""The tool-call reliability layer (issue 20): the call grammar (lazy in `auto`), validation and
safe coercion of calls against their schemas, the retry policy and its feedback messages, the
per-call confidence and the report. Pure decisions, no engine and no torch: hearth.api.guarded
runs the attempts, LLM.chat runs them offline.

Hook points for the steps that plug in (rescue, workflow, compaction, tool ranking):
- triggers.register(fmt, Trigger): more openers the lazy grammar switches on at;
- checks.check_calls: the problems an attempt has (a workflow policy adds its own);
- feedback.retry_messages: what a re-prompt says;
- GuardReport.notes: extra keys of the `hearth` response field."""

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
