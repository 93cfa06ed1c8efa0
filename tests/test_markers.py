"""The test kinds tests/conftest.py gives each test, and that pyproject.toml registers them all."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import EMULATED, ONCE, PROCESSES, TIERED, UNTIERED, holds_tiered, markers

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


@pytest.mark.parametrize("rel,fixtures,params,kinds", [
    ("loader/test_catalog.py", ["home"], "", {"unit"}),
    ("sample/test_edge_cases.py", ["tmp_path"], "", {"unit"}),
    ("loader/test_tokenizer.py", ["model_path"], "", {"real_model"}),
    ("server/test_requests.py", ["make_fake"], "", {"server"}),  # the app in-process around a fake engine
    ("server/test_real_server.py", ["real_server", "model_path"], "", {"real_model", "server"}),
    ("server/test_chat_page.py", ["browser", "real_server", "model_path"], "", {"real_model", "server", "browser"}),
    ("kernels/test_native.py", [], "Q4_K", {"unit", "tiered"}),
    ("gpu/test_cuda_backend.py", ["tmp_path"], "llama", {"unit", "emulated"}),  # Triton's interpreter
    ("arm/test_neon_kernels.py", [], "plain", {"unit", "emulated"}),  # qemu-user
    ("kernels/test_tiers.py", [], "", {"unit"}),  # UNTIERED: the same code at every tier
    ("kernels/test_native_avx2.py", [], "Q4_K", {"unit"}),
    ("test_golden_llamacpp.py", ["model_path"], "smollm2-135m", {"real_model", "tiered"}),
    ("test_golden_llamacpp.py", ["model_path"], "gemma3-270m", {"real_model"}),
    ("test_engine_equivalence.py", ["model_path"], "seeded", {"real_model"}),
    ("test_engine_equivalence.py", ["model_path"], "greedy", {"real_model", "tiered"}),
])
def test_kinds_by_path_and_fixtures(rel, fixtures, params, kinds):
    assert markers(rel, fixtures, params) == kinds


def test_a_test_that_starts_a_program_is_process_not_unit():
    assert markers("test_doctor.py", ["tmp_path"], "", "test_doctor_explains_a_forced_tier_it_cannot_use") == {"process"}
    assert markers("test_cli.py", ["capsys"], "", "test_a_broken_pipe_other_than_stdout_is_an_error") == {"process"}
    assert markers("test_cli.py", ["capsys"], "", "test_version") == {"unit"}


def test_a_test_that_pulls_a_model_itself_is_real_model():
    assert markers("loader/test_catalog.py", ["home"], "", "test_real_pull_of_default_model_via_cli") == {"real_model"}


@pytest.mark.parametrize("rel,is_dir,held", [
    ("kernels", True, True), ("models", True, True), ("server", True, False), ("tool_parsers", True, False),
    ("kernels/test_native.py", False, True), ("kernels/test_tiers.py", False, False),
    ("models/test_fidelity.py", False, True), ("models/test_registry.py", False, False),
    ("test_golden_llamacpp.py", False, True), ("test_cli.py", False, False),
])
def test_a_tiered_pass_imports_only_what_holds_tiered_tests(rel, is_dir, held):
    assert holds_tiered(rel, is_dir) == held


def test_every_kind_is_registered_and_every_tiered_path_exists():
    registered = {m.split(":")[0] for m in tomllib.loads(PYPROJECT.read_text())["tool"]["pytest"]["ini_options"]["markers"]}
    assert registered == {"unit", "real_model", "server", "browser", "emulated", "tiered", "process"}
    tests = PYPROJECT.parent / "tests"
    assert all((tests / rel).exists() for rel in TIERED + EMULATED)
    assert all((tests / rel).is_file() for rel, _ in ONCE)
    assert all((tests / rel).is_file() and rel.startswith(TIERED) for rel in UNTIERED)
    for entry in PROCESSES:  # a module, or a function in it
        rel, _, function = entry.partition("::")
        assert (tests / rel).is_file() and (not function or f"def {function}(" in (tests / rel).read_text()), entry
