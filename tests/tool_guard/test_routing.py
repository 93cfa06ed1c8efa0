"""The router's decisions (hearth.tool_guard.routing), no engine: which tool_choice the small model
gets, and why its attempt is not the answer, rule by rule in order."""

from __future__ import annotations

import pytest

from hearth.tool_guard.routing import Probe, fallback_reason, probe_choice


@pytest.mark.parametrize("choice,probe", [
    (None, "auto"),  # its own choice: text tells the router no call is due
    ("auto", "auto"),
    ("required", "required"),
    ({"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}),
])
def test_the_small_model_gets_the_clients_choice(choice, probe):
    assert probe_choice(choice) == probe


@pytest.mark.parametrize("probe,threshold,reason", [
    (Probe(1, [0.9], True), 0.5, None),  # intent and confidence: its call is the answer
    (Probe(1, [0.4], True), 0.5, "low_confidence"),
    (Probe(1, [0.4], True), 0.4, None),  # at the threshold counts
    (Probe(0, [], True, text=True), 0.0, "text"),  # it began in text: it would not call
    (Probe(0, [], True, text=True, declined=True), 0.0, "declined"),  # the gate gave its call back as text
    (Probe(0, [], False, text=True), 0.0, "invalid_call"),  # a call of no offered tool, as text
    (Probe(0, [], True), 0.0, "no_call"),
    (Probe(1, [None], True), 0.0, "no_confidence"),
    (Probe(2, [0.9, 0.3], True), 0.5, "low_confidence"),  # the least sure call decides
    (Probe(0, [0.2], True, stopped="low_confidence"), 0.5, "low_confidence"),  # judged at its name, stopped there
    (Probe(0, [0.9], True, stopped="declined"), 0.0, "declined"),
])
def test_fallback_reasons_in_order(probe, threshold, reason):
    assert fallback_reason(probe, threshold) == reason
