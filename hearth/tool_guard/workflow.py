"""`hearth.workflow`: a multi-step policy a request may carry — required steps, prerequisites (tool B
only after tool A, optionally with matching arguments), terminal tools, and a cap on identical
calls (loop detection).

The server keeps no state between requests: a policy's progress is derived, every request, from the
structured tool calls in the conversation the client sends (assistant `tool_calls`), never from
prose, so trimming or compacting old text cannot make the server forget a step."""

from __future__ import annotations

from dataclasses import dataclass, field

from hearth.tool_guard.call_arguments import arguments_dict
from hearth.tool_guard.nudge import Verdict
from hearth.tool_guard.request_fields import FieldError, check_keys, int_field, names_field
from hearth.tool_parsers.types import ToolCall

_KEYS = ("required", "prerequisites", "terminal", "max_repeats", "max_nudges")
_PREREQ_KEYS = ("tool", "after", "match")
MAX_NUDGES = 4  # each nudge is another generation inside the request: bounded for every client


@dataclass(frozen=True, slots=True)
class Prerequisite:
    tool: str
    after: str
    match: tuple[str, ...] = ()
    """Arguments `tool` must share with an earlier call of `after` (e.g. the same `order_id`)."""


@dataclass(frozen=True, slots=True)
class Workflow:
    required: tuple[str, ...] = ()
    """Tools that must each have been called before a final answer (or a terminal call)."""
    prerequisites: tuple[Prerequisite, ...] = ()
    terminal: tuple[str, ...] = ()
    """Tools that end the task: after one was called, no further call is allowed."""
    max_repeats: int = 2
    """How many times the same call (tool and arguments) may be made; one more is a loop."""
    max_nudges: int = 2
    """Nudges per request; after them the output is returned as it is."""


@dataclass(slots=True)
class Progress:
    """The calls made so far, in order: (tool, arguments)."""
    calls: list[tuple[str, dict]] = field(default_factory=list)

    def called(self, name: str) -> bool:
        return any(n == name for n, _ in self.calls)

    def count(self, name: str, args: dict) -> int:
        return sum(1 for n, a in self.calls if n == name and a == args)


def parse_workflow(value, tool_names: list[str], param: str = "hearth.workflow") -> Workflow:
    """The wire object -> a Workflow; FieldError naming the field for anything wrong."""
    check_keys(value, _KEYS, param)
    prereqs = value.get("prerequisites", [])
    if not isinstance(prereqs, list):
        raise FieldError(f"{param}.prerequisites", "must be a list of {tool, after, match} objects")
    return Workflow(names_field(value, "required", tool_names, param),
                    tuple(_prerequisite(p, tool_names, f"{param}.prerequisites[{i}]") for i, p in enumerate(prereqs)),
                    names_field(value, "terminal", tool_names, param),
                    int_field(value, "max_repeats", 2, param, low=1), int_field(value, "max_nudges", 2, param, low=0, high=MAX_NUDGES))


def _prerequisite(value, tool_names: list[str], param: str) -> Prerequisite:
    check_keys(value, _PREREQ_KEYS, param)
    for key in ("tool", "after"):
        if value.get(key) not in tool_names:
            raise FieldError(f"{param}.{key}", f"must name one of the tools, got {value.get(key)!r}")
    match = value.get("match", [])
    if not isinstance(match, list) or not all(isinstance(m, str) for m in match):
        raise FieldError(f"{param}.match", "must be a list of argument names")
    return Prerequisite(value["tool"], value["after"], tuple(match))


def progress(messages: list[dict]) -> Progress:
    """The calls in a conversation's assistant turns (template messages, hearth.api.messages)."""
    out = Progress()
    for m in messages:
        for call in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            fn = call.get("function") or {}
            out.calls.append((fn.get("name", ""), arguments_dict(fn.get("arguments"))))
    return out


def review(workflow: Workflow, done: Progress, calls: list[ToolCall]) -> Verdict | None:
    """The first rule the output (`calls`, none for a final answer) breaks, or None."""
    seen = Progress(list(done.calls))
    if not calls:
        return _premature(workflow, seen)
    for i, call in enumerate(calls):
        args = arguments_dict(call.arguments)
        verdict = _check_call(workflow, seen, call.name, args, i)
        if verdict is not None:
            return verdict
        seen.calls.append((call.name, args))
    return None


def _premature(workflow: Workflow, seen: Progress) -> Verdict | None:
    if any(seen.called(t) for t in workflow.terminal):
        return None
    missing = [t for t in workflow.required if not seen.called(t)]
    if not missing:
        return None
    return Verdict("premature_answer", f"The task is not finished: call {', '.join(missing)} first.",
                   force=tuple(missing))


def _check_call(workflow: Workflow, seen: Progress, name: str, args: dict, i: int) -> Verdict | None:
    ended = [t for t in workflow.terminal if seen.called(t)]
    if ended:
        return Verdict("after_terminal", f"The task is complete ({ended[0]} was called): answer without "
                       "calling more tools.", i)
    for p in workflow.prerequisites:
        if p.tool == name and not _satisfied(p, seen, args):
            same = f" with the same {', '.join(p.match)}" if p.match else ""
            return Verdict("missing_prerequisite", f"{name} can only be called after {p.after}{same}.", i,
                           force=(p.after,))
    if name in workflow.terminal:
        missing = [t for t in workflow.required if not seen.called(t) and t != name]
        if missing:
            return Verdict("premature_answer", f"call {', '.join(missing)} before {name}.", i, force=tuple(missing))
    repeats = seen.count(name, args)
    if repeats >= workflow.max_repeats:
        return Verdict("repeated_call", f"{name} was already called {repeats} times with these arguments: use "
                       "its result, or call it with other arguments.", i)
    return None


def _satisfied(p: Prerequisite, seen: Progress, args: dict) -> bool:
    return any(n == p.after and all(m in a and a[m] == args.get(m) for m in p.match) for n, a in seen.calls)
