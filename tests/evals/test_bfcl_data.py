"""The BFCL loader, against a hand-made wheel-like zip (no network)."""

from __future__ import annotations

import pytest

from hearth.errors import HearthError
from hearth.evals.bfcl_data import extract_backends, load_category, sample
from hearth.evals.bfcl_tools import to_tools
from tests.evals.fake_bfcl import TICKET_DOCS, make_wheel


@pytest.fixture
def wheel(tmp_path):
    return make_wheel(tmp_path / "bfcl_eval-2026.3.23-py3-none-any.whl")


def test_single_turn_items_join_their_answers(wheel):
    items = load_category(wheel, "simple_python")
    assert [i.id for i in items] == ["simple_python_0", "simple_python_1"]
    assert items[0].turns == [[{"role": "user", "content": "Area for base 3?"}]]
    assert items[1].answer == [{"geo.area": {"base": [4], "h": [""]}}]
    assert load_category(wheel, "irrelevance")[0].answer == []


def test_multi_turn_items_get_their_classes_docs(wheel):
    (item,) = load_category(wheel, "multi_turn_base")
    assert item.functions == TICKET_DOCS
    assert item.involved_classes == ["TicketAPI"] and item.initial_config == {"TicketAPI": {"tickets": {}}}
    assert item.answer[1] == ["get_ticket(ticket_id='0')"]


def test_errors_name_the_problem(wheel):
    with pytest.raises(HearthError, match="unknown category 'simple_java'"):
        load_category(wheel, "simple_java")
    with pytest.raises(HearthError, match="has no bfcl_eval/data/BFCL_v4_parallel.json"):
        load_category(wheel, "parallel")


def test_sample_spreads_and_repeats():
    xs = list(range(10))
    assert sample(xs, 3) == [0, 3, 6] == sample(xs, 3)
    assert sample(xs, 0) == xs and sample(xs, 20) == xs


def test_an_offset_sample_is_disjoint_from_the_first():
    xs = list(range(20))
    assert sample(xs, 4, 2) == [2, 7, 12, 17] and not set(sample(xs, 4, 2)) & set(sample(xs, 4))
    with pytest.raises(HearthError, match="--offset 5: .* 20 items, so 4 picks are 5 apart"):
        sample(xs, 4, 5)  # would land on the first sample's next pick


def test_tools_as_openai_sees_them(wheel):
    ts = to_tools(load_category(wheel, "simple_python")[0].functions)
    fn = ts.tools[0]["function"]
    assert fn["name"] == "geo_area" and ts.original == {"geo_area": "geo.area"}
    assert fn["parameters"]["type"] == "object"
    assert fn["parameters"]["properties"]["h"]["type"] == "number"
    ts = to_tools(TICKET_DOCS)
    assert "response" not in ts.tools[0]["function"]


def test_backends_extracted_under_our_own_inits(wheel, tmp_path):
    root = extract_backends(wheel, home=tmp_path)
    pkg = root / "bfcl_eval/eval_checker/multi_turn_eval/func_source_code"
    assert (pkg / "ticket_api.py").is_file()
    assert (root / "bfcl_eval/__init__.py").read_text() == "" and (pkg / "__init__.py").read_text() == ""
    assert extract_backends(wheel, home=tmp_path) == root  # once


def test_fetch_refuses_a_wheel_with_another_hash(tmp_path):
    import zipfile

    from hearth.errors import DownloadError
    from hearth.evals.bfcl_data import fetch_wheel, wheel_path

    index = tmp_path / "index"
    index.mkdir()
    fake = make_wheel(index / "bfcl_eval-2026.3.23-py3-none-any.whl")
    with zipfile.ZipFile(fake, "a") as zf:  # what pip reads of a wheel
        zf.writestr("bfcl_eval-2026.3.23.dist-info/METADATA", "Metadata-Version: 2.1\nName: bfcl-eval\nVersion: 2026.3.23\n")
        zf.writestr("bfcl_eval-2026.3.23.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("bfcl_eval-2026.3.23.dist-info/RECORD", "")
    home = tmp_path / "home"
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        fetch_wheel(home, progress=False, pip_args=["--no-index", "--find-links", str(index)])
    assert not wheel_path(home).exists()
