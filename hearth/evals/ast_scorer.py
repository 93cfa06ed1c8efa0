"""BFCL's AST rules for single-turn categories, implemented from their documentation (the
leaderboard's blog, "Evaluation metrics"): a call matches a possible answer when

- the function name is the expected one;
- every required parameter is present, and no parameter is given that the function or the answer
  does not list ("unexpected");
- each value has the documented type (an int is accepted for a float; arrays are checked one
  level deep), or the type of the answer's values (a variable name standing for the value);
- each value is one of the answer's allowed values: strings compared normalized (case, spaces and
  `,./-_*^` ignored, ' read as "), lists element-wise, dicts key by key;
- a parameter the answer lists but the call leaves out is allowed only when "" is among its
  allowed values (an optional parameter).

Calls are {name: {param: value}} with the values as JSON decoded them. simple/multiple want exactly
one call; parallel categories want the answer's calls in any order (a perfect matching, so a call
that fits two answers cannot hide a fit elsewhere); irrelevance wants no call at all."""

from __future__ import annotations

import re
from dataclasses import dataclass

Call = dict  # {name: {param: value}}

PY_TYPES = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list,
            "dict": dict, "any": str}
_NORMALIZE = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str = ""


PASS = Verdict(True)


def normalize(s: str) -> str:
    return _NORMALIZE.sub("", s).lower().replace("'", '"')


def _norm(v):
    return normalize(v) if isinstance(v, str) else v


def _answer_type(allowed: list):
    """The type of the answer's values ("" marks the parameter optional and says nothing)."""
    return next((type(a) for a in allowed if a != ""), None)


def check_type(param: str, value, doc: dict, allowed: list) -> Verdict:
    declared = doc.get("type", "string")
    want = PY_TYPES.get(declared)
    if want is None:  # a type BFCL's Python checker does not know: value check only
        return PASS
    if type(value) is want:
        if declared in ("array", "tuple") and isinstance(doc.get("items"), dict):
            inner = PY_TYPES.get(doc["items"].get("type", "string"))
            if inner is not None and inner is not dict and any(type(_float(v, doc["items"])) is not inner for v in value):
                return Verdict(False, f"{param}: array items must be {doc['items'].get('type')}")
        return PASS
    if type(value) is _answer_type(allowed):  # e.g. a variable's name where the answer has a string
        return PASS
    return Verdict(False, f"{param}: expected {declared}, got {type(value).__name__}")


def _float(v, doc: dict):
    return float(v) if doc.get("type") == "float" and type(v) is int else v


def _dict_matches(value: dict, allowed: dict) -> bool:
    for k, v in value.items():
        if k not in allowed or _norm(v) not in [_norm(a) for a in allowed[k]]:
            return False
    return all(k in value or "" in opts for k, opts in allowed.items())


def check_value(param: str, value, doc: dict, allowed: list) -> Verdict:
    declared = doc.get("type", "string")
    items = doc.get("items") if isinstance(doc.get("items"), dict) else {}
    if declared == "dict" and isinstance(value, dict):
        ok = any(isinstance(a, dict) and _dict_matches(value, a) for a in allowed)
    elif declared in ("array", "tuple") and items.get("type") == "dict" and isinstance(value, list):
        ok = any(isinstance(a, list) and len(a) == len(value)
                 and all(isinstance(d, dict) and isinstance(x, dict) and _dict_matches(x, d) for x, d in zip(value, a))
                 for a in allowed)
    elif isinstance(value, str):
        ok = normalize(value) in [normalize(a) for a in allowed if isinstance(a, str)]
    elif isinstance(value, list):
        ok = [_norm(v) for v in value] in [[_norm(x) for x in a] for a in allowed if isinstance(a, list)]
    else:
        ok = value in [a for a in allowed if a != ""]
    return PASS if ok else Verdict(False, f"{param}: {value!r} is not one of {allowed!r}")


def check_call(doc: dict, args: dict, answer: dict) -> Verdict:
    """One call's arguments against one possible answer {param: allowed values} of function `doc`."""
    props = doc.get("parameters", {}).get("properties", {})
    for p in doc.get("parameters", {}).get("required", []):
        if p not in args:
            return Verdict(False, f"missing required parameter {p!r}")
    for p, value in args.items():
        if p not in props or p not in answer:
            return Verdict(False, f"unexpected parameter {p!r}")
        value = _float(value, props[p])  # Python's own int -> float promotion
        for check in (check_type, check_value):
            v = check(p, value, props[p], answer[p])
            if not v.ok:
                return v
    for p, allowed in answer.items():
        if p not in args and "" not in allowed:
            return Verdict(False, f"parameter {p!r} left out but not optional")
    return PASS


def _find(functions: list[dict], name: str) -> dict | None:
    return next((f for f in functions if f["name"] == name), None)


def match_one(functions: list[dict], call: Call, expected: dict) -> Verdict:
    (want, answer), = expected.items()
    (name, args), = call.items()
    if name != want:
        return Verdict(False, f"called {name!r}, expected {want!r}")
    doc = _find(functions, want)
    if doc is None:
        return Verdict(False, f"the answer's function {want!r} is not among the offered functions")
    if not isinstance(args, dict):
        return Verdict(False, f"{name}: arguments are not an object")
    return check_call(doc, args, answer)


def score(category: str, functions: list[dict], calls: list[Call], answer: list[dict]) -> Verdict:
    if category == "irrelevance":
        return PASS if not calls else Verdict(False, f"called {', '.join(n for c in calls for n in c)} on an irrelevant request")
    if len(calls) != len(answer):
        return Verdict(False, f"{len(calls)} calls, expected {len(answer)}")
    if "parallel" not in category:
        return match_one(functions, calls[0], answer[0])
    return _match_all(functions, calls, answer)


def _match_all(functions: list[dict], calls: list[Call], answer: list[dict]) -> Verdict:
    """A perfect matching between calls and expected calls (augmenting paths: n is a handful)."""
    fits = [[match_one(functions, c, a).ok for c in calls] for a in answer]
    owner: dict[int, int] = {}  # call index -> answer index

    def place(a: int, seen: set[int]) -> bool:
        for c, ok in enumerate(fits[a]):
            if ok and c not in seen:
                seen.add(c)
                if c not in owner or place(owner[c], seen):
                    owner[c] = a
                    return True
        return False

    for a in range(len(answer)):
        if not place(a, set()):
            (want,) = answer[a]
            why = next((match_one(functions, c, answer[a]).reason for c in calls if next(iter(c)) == want), None)
            return Verdict(False, f"no call matches expected call {a} ({want})" + (f": {why}" if why else ""))
    return PASS
