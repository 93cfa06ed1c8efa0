"""Run in a child process by hearth.evals.backends, never imported by hearth: hosts BFCL's
multi-turn tool backends (Python classes from the bfcl-eval wheel) so their code runs outside the
server's process. One JSON request per stdin line, one JSON answer per line on the original stdout
(the backends' own prints go to stderr).

    {"op": "load", "classes": {name: module}, "config": {...}, "stateless": [...]}
        two fresh instance sets per class, "model" and "truth", each loaded with the scenario
    {"op": "call", "side": "model"|"truth", "name": method, "args": [...], "kwargs": {...}}
        -> {"result": str}: the method's return value as BFCL records it (str as is, dict as JSON,
           anything else str()), or "Error during execution: ..." when it raises or is unknown
    {"op": "compare"} -> {"differences": {class.attribute: [model, truth]}}: public attributes
        (no leading _) that differ between the two sets, as BFCL's state check compares them"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import os
import sys

PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"


def load(req: dict) -> dict:
    sides = {}
    for side in ("model", "truth"):
        instances, methods = {}, {}
        for cls, module in req["classes"].items():
            obj = getattr(importlib.import_module(f"{PACKAGE}.{module}"), cls)()
            if cls not in req.get("stateless", []):
                obj._load_scenario(copy.deepcopy(req["config"].get(cls, {})), long_context=False)
            instances[cls] = obj
            for name, _ in inspect.getmembers(obj, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    methods[name] = obj  # a later class wins a shared name, as in BFCL
        sides[side] = (instances, methods)
    return sides


def record(value) -> str:
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def call(sides: dict, req: dict) -> dict:
    _, methods = sides[req["side"]]
    name = req["name"]
    if name not in methods:
        return {"result": f"Error during execution: name '{name}' is not defined"}
    try:
        return {"result": record(getattr(methods[name], name)(*req.get("args", []), **req.get("kwargs", {})))}
    except Exception as e:  # noqa: BLE001 - the backend's error is the tool's answer
        return {"result": f"Error during execution: {e}"}


def compare(sides: dict) -> dict:
    diffs = {}
    for cls, truth in sides["truth"][0].items():
        mine = sides["model"][0][cls]
        for attr, want in vars(truth).items():
            if not attr.startswith("_") and getattr(mine, attr, None) != want:
                diffs[f"{cls}.{attr}"] = [repr(getattr(mine, attr, None))[:300], repr(want)[:300]]
    return {"differences": diffs}


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout = sys.stderr  # a backend's print() must not corrupt the protocol
    sides: dict = {}
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "load":
                sides = load(req)
                answer = {"ok": True}
            elif req["op"] == "call":
                answer = call(sides, req)
            else:
                answer = compare(sides)
        except Exception as e:  # noqa: BLE001 - reported to the parent, which fails the item
            answer = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
