"""A tiny stand-in for the bfcl-eval wheel: the same member layout, a few hand-made items and a
hand-written backend class, so the loader and the multi-turn machinery are tested without network."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from hearth.evals.bfcl_data import BACKENDS, DATA

AREA = {"name": "geo.area", "description": "Area of a triangle", "parameters": {"type": "dict", "required": ["base"],
        "properties": {"base": {"type": "integer", "description": "base"}, "h": {"type": "float", "description": "height"}}}}
SIMPLE = [{"id": "simple_python_0", "question": [[{"role": "user", "content": "Area for base 3?"}]], "function": [AREA]},
          {"id": "simple_python_1", "question": [[{"role": "user", "content": "Area for base 4?"}]], "function": [AREA]}]
SIMPLE_ANSWERS = [{"id": "simple_python_0", "ground_truth": [{"geo.area": {"base": [3], "h": ["", 1.0]}}]},
                  {"id": "simple_python_1", "ground_truth": [{"geo.area": {"base": [4], "h": [""]}}]}]
IRRELEVANCE = [{"id": "irrelevance_0", "question": [[{"role": "user", "content": "Sing."}]], "function": [AREA]}]
TICKET_DOCS = [
    {"name": "create_ticket", "description": "Open a ticket", "parameters": {"type": "dict", "required": ["title"],
     "properties": {"title": {"type": "string", "description": "t"}, "priority": {"type": "integer", "description": "p"}}},
     "response": {"type": "dict", "properties": {"id": {"type": "string"}}}},
    {"name": "get_ticket", "description": "Read a ticket", "parameters": {"type": "dict", "required": ["ticket_id"],
     "properties": {"ticket_id": {"type": "string", "description": "id"}}}},
]
MULTI = [{"id": "multi_turn_base_0", "question": [[{"role": "user", "content": "Open a ticket 'disk full'."}],
                                                  [{"role": "user", "content": "Show it."}]],
          "initial_config": {"TicketAPI": {"tickets": {}}}, "path": [], "involved_classes": ["TicketAPI"]}]
MULTI_ANSWERS = [{"id": "multi_turn_base_0", "ground_truth": [["create_ticket(title='disk full')"],
                                                              ["get_ticket(ticket_id='0')"]]}]
BACKEND = '''
class TicketAPI:
    def __init__(self):
        self.tickets = {}
        self._seen = 0  # private: not part of the state check

    def _load_scenario(self, scenario, long_context=False):
        self.tickets = dict(scenario.get("tickets", {}))

    def create_ticket(self, title: str, priority: int = 1):
        print("backends print; the protocol must survive it")
        self._seen += 1
        tid = str(len(self.tickets))
        self.tickets[tid] = {"title": title, "priority": priority}
        return {"id": tid}

    def get_ticket(self, ticket_id: str):
        return self.tickets[ticket_id]

    def wait(self, seconds: float):
        import time
        time.sleep(seconds)
        return "done"
'''


def _lines(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def make_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{DATA}/BFCL_v4_simple_python.json", _lines(SIMPLE))
        zf.writestr(f"{DATA}/possible_answer/BFCL_v4_simple_python.json", _lines(SIMPLE_ANSWERS))
        zf.writestr(f"{DATA}/BFCL_v4_irrelevance.json", _lines(IRRELEVANCE))
        zf.writestr(f"{DATA}/BFCL_v4_multi_turn_base.json", _lines(MULTI))
        zf.writestr(f"{DATA}/possible_answer/BFCL_v4_multi_turn_base.json", _lines(MULTI_ANSWERS))
        zf.writestr(f"{DATA}/multi_turn_func_doc/ticket_api.json", _lines(TICKET_DOCS))
        zf.writestr(f"{BACKENDS}/__init__.py", "raise RuntimeError('the wheel's own __init__ must not run')\n")
        zf.writestr(f"{BACKENDS}/ticket_api.py", BACKEND)
        zf.writestr("bfcl_eval/__init__.py", "raise RuntimeError('the wheel's own __init__ must not run')\n")
    return path
