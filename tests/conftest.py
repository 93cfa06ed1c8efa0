"""Shared fixtures, the test kinds and the CPU tier.

`model_path(name)` gives the local .gguf of a catalog model (or any name resolve_model accepts),
downloading it once into $HEARTH_HOME (default ~/.cache/hearth) so later runs reuse it.

Every test gets markers by what it needs (pyproject.toml registers them), set here rather than in
hundreds of files: `real_model` (the model_path fixture), `server` (tests/server: the HTTP app in-process
or a real `hearth serve`), `browser` (headless Chromium), `process` (starts another program: PROCESSES),
`unit` (none of those), `emulated` (another machine's code run here: the CUDA backend in Triton's
interpreter, the neon tier under qemu-user; `make test-fast` runs the unit tests but these), and `tiered`
for the modules whose code differs per CPU tier, which `make test` runs once per tier."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

# OpenMP threads sleep as soon as a parallel region ends instead of spinning for ~15 ms (libgomp's
# default 300,000 pauses): make test runs two pytest processes (and served subprocesses) on 2 cores,
# where spinning workers took the cores the others needed (a golden file: 54-60 CPU-s against 8 at
# load 6). Set before torch loads libgomp. Alone on idle cores a decode step waits for the worker's
# wake-up instead (SmolLM2: ~16 ms against ~6.5): GOMP_SPINCOUNT=300000 restores the spin for such runs.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HEARTH_CHECK_LAUNCHES", "1")  # every Triton launch checked (hearth/kernels/gpu/launch.py)
os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton's kernels run in its interpreter: no GPU here
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # local Ray instances on loopback only (hearth.cluster.launch)

from hearth.kernels import tiers  # noqa: E402
from hearth.loader.resolve import resolve_model  # noqa: E402
from hearth.loader.store import hearth_home  # noqa: E402

TESTS = Path(__file__).resolve().parent
TIERED = ("kernels/", "backends/", "layers/test_linear.py", "models/test_logits_vs_transformers.py", "models/test_native_decode.py",
          "test_golden_llamacpp.py", "test_engine_equivalence.py", "models/test_fidelity.py", "memory/test_layouts.py",
          "models/test_lora.py", "models/test_gpt_oss.py",
          "models/test_granite_smollm3_olmo2.py", "models/test_qwen35_llamacpp.py", "models/test_thread_invariance.py")
"""Kernels, quantized linears, model logits vs transformers, llama.cpp goldens (qwen35's tiny files too), engine
equivalence, fidelity, the planner's weight layouts (priced as the tier holds them), LoRA adapters over each
tier's linears, the same bits at any thread count."""
ONCE = {  # (module, parameter id): slow cases of tiered modules left to the best tier's run, and why
    ("test_golden_llamacpp.py", "gemma3-270m"): "its kernels run per tier on the tiny gemma3 files; 4x SmolLM2's time",
    ("test_golden_llamacpp.py", "qwen2.5-coder-1.5b"): "the 0.5B (same architecture and quant types) runs per tier; 3x its time",
    ("models/test_fidelity.py", "qwen2.5-coder-0.5b"): "SmolLM2's fidelity runs per tier; the 0.5B's is 4x its time",
    ("test_engine_equivalence.py", "seeded"): "sampling is the same code at every tier; greedy runs the kernels",
}
UNTIERED = {  # modules under TIERED whose code is the same at every tier: run once, in the best tier's pass
    "kernels/test_tiers.py": "tier choice on made-up CPU flag sets",
    "kernels/test_native_avx2.py": "opens the avx2 and avx512 libraries by name (native.open_tier), whichever tier runs",
}
BROWSER = ("server/test_chat_page.py",)
EMULATED = ("gpu/", "arm/")
"""Triton's interpreter and qemu-user: single-threaded emulation, minutes of CPU together (make test only)."""
PROCESSES = {  # tests that start another program (tests/`module` or `module::function`), by what they start
    "bench/test_bench_spec_script.py": "the speculation benchmark against fake servers",
    "bench/test_readme_performance.py::test_whole_run_against_fake_servers": "the README benchmark against fake servers",
    "bench/test_rss.py": "a child whose peak RSS is read",
    "cluster/test_cluster_bad_input.py::test_not_a_ray_head_is_one_line_without_rays_log": "hearth cluster serve",
    "cluster/test_cluster_bad_input.py::test_one_model_only": "hearth cluster serve",
    "cluster/test_cluster_bad_input.py::test_a_grpc_server_that_is_not_rays_is_one_line_in_bounded_time":
        "hearth cluster serve",
    "cluster/test_join.py": "ray start",
    "cluster/test_local_start.py": "a local Ray instance",
    "evals/test_bfcl_data.py::test_fetch_refuses_a_wheel_with_another_hash": "pip download",
    "evals/test_eval_tools_cli.py": "hearth eval tools",
    "evals/test_eval_tools_url.py": "a served fake model",
    "evals/test_tool_eval.py": "BFCL's tool backends",
    "kernels/test_atomic_build.py": "a (fake) compiler",
    "kernels/test_native_avx2.py::test_a_compiler_without_avx512_builds_the_avx2_tier": "g++",
    "kvstore/test_disk_store.py::test_leftover_temporary_file_of_a_dead_writer_is_removed": "a writer killed mid-file",
    "kvstore/test_prefault.py::test_the_worker_stops_before_the_interpreter_finalizes": "an interpreter that exits",
    "layers/test_linear.py::test_int4_expansion_reads_the_layout_of_each_cpu_capability": "torch at each ATen capability",
    "loader/test_catalog_header.py": "pip download",
    "loader/test_download.py": "pip download",
    "memory/test_this_machine.py": "the bandwidth measurement",
    "test_cli.py::test_a_broken_pipe_other_than_stdout_is_an_error": "the CLI",
    "test_cli.py::test_a_reader_that_closed_stdout_early_ends_it_quietly": "the CLI",
    "test_cli_run_prompt.py::test_ctrl_c_at_the_prompt_gives_a_fresh_prompt_every_time": "hearth run in a terminal",
    "test_doctor.py": "hearth doctor",
    "test_layering.py::test_the_commands_load_no_torch_before_they_must": "the CLI's commands",
    "test_openmp.py": "interpreters that load torch",
}
"""A test that starts a program (the CLI, a server, Ray, a compiler) takes seconds where a unit test takes
milliseconds: `process`, not `unit` (a `unit` test that starts one fails naming it; tests/server's are `server`)."""
PULLS = ("loader/test_catalog.py::test_real_pull_of_default_model_via_cli",)
"""Tests that download a real model themselves, into a temporary HEARTH_HOME (not through model_path)."""


def pytest_configure(config):
    tiers.selected()  # before torch's first matmul: a forced lower tier caps oneDNN's ISA too


def tier_line() -> str:
    if os.environ.get("HEARTH_NATIVE", "1") == "0":  # wins over HEARTH_CPU_TIER, as in tiers.choose
        why = "HEARTH_NATIVE=0"
    elif os.environ.get("HEARTH_CPU_TIER", "").strip():
        why = "forced by HEARTH_CPU_TIER"
    else:
        why = "the best this CPU runs"
    return f"hearth CPU tier: {tiers.active()} ({why})"


def pytest_report_header(config):
    return tier_line()


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(tier_line())  # also under -q, which drops the header


_exit_status: list[int] = []


def pytest_sessionfinish(session, exitstatus):
    _exit_status.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Leave without the interpreter's teardown once every result is reported: a native library's
    thread (seen intermittently: "terminate called without an active exception", even at the torch
    tier with no hearth C++ loaded) could abort the process there and turn a passing run into a failure."""
    if _exit_status:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status[-1])


def markers(rel: str, fixtures, params: str = "", name: str = "") -> set[str]:
    """The kinds of test function `name` in tests/`rel` that uses `fixtures`, parametrized as `params` ("a-b")."""
    kinds = set()
    if "model_path" in fixtures or f"{rel}::{name}" in PULLS:
        kinds.add("real_model")
    if rel.startswith("server/"):
        kinds.add("server")
    if rel in BROWSER:
        kinds.add("browser")
    if rel in PROCESSES or f"{rel}::{name}" in PROCESSES:
        kinds.add("process")
    if not kinds:
        kinds.add("unit")
    if rel.startswith(EMULATED):
        kinds.add("emulated")
    if rel.startswith(TIERED) and rel not in UNTIERED and not any(rel == m and f"-{p}-" in f"-{params}-" for m, p in ONCE):
        kinds.add("tiered")
    return kinds


def holds_tiered(rel: str, is_dir: bool) -> bool:
    """Whether tests/`rel` (a folder, or a test module) holds tiered tests."""
    if is_dir:
        return any(t.startswith(f"{rel}/") or f"{rel}/".startswith(t) for t in TIERED)
    return rel.startswith(TIERED) and rel not in UNTIERED


def pytest_ignore_collect(collection_path: Path, config):
    """Under `-m tiered` alone (make test's passes at the other tiers) only the folders and modules
    holding tiered tests are imported: the others' tests would all be deselected, after seconds of imports."""
    path = collection_path.resolve()
    if (config.getoption("markexpr") or "").strip() != "tiered" or path == TESTS or not path.is_relative_to(TESTS):
        return None
    is_dir = path.is_dir()
    if not (is_dir or path.name.startswith("test_")):
        return None
    return None if holds_tiered(path.relative_to(TESTS).as_posix(), is_dir) else True


SHARED_WORKER = {
    # the fidelity test's prefill path and the goldens read the same teacher-forced rows (tests/teacher_forced.py)
    "tests/models/test_fidelity.py": "tests/test_golden_llamacpp.py",
    # gguf_py_reader: gguf-py's parse of gemma3-270m's 262K-entry vocabulary is 12 CPU-s (SmolLM2's 2.7)
    "tests/loader/test_gguf_loader.py": "tests/memory/test_weights.py",
    # plan_home: this machine's measurement (a subprocess, ~4 CPU-s)
    "tests/memory/test_this_machine.py": "tests/memory/test_resident.py",
}
"""Modules make test's xdist workers keep together (`--dist loadfile`): they read the same costly
session fixture, made once per process (each pair one unit of work, in the first one's place)."""


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the SHARED_WORKER modules one unit of work (other modes: xdist's own)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return SHARED_WORKER.get(module, module)

    return Scheduling(config, log)


HEAVY = ("real_model", "browser", "emulated", "process")
"""Kinds of test that take seconds each, where a unit test takes milliseconds."""


def pytest_collection_modifyitems(config, items):
    heavy: dict[str, int] = {}
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix()
        params = item.callspec.id if hasattr(item, "callspec") else ""
        kinds = markers(rel, item.fixturenames, params, item.originalname)
        for kind in sorted(kinds):
            item.add_marker(kind)
        heavy[rel] = heavy.get(rel, 0) + any(k in kinds for k in HEAVY)
    # the modules with the most heavy tests first, each module's order kept: make test's xdist workers take
    # whole modules in this order, so the long ones start at once and the short ones even out the end
    items.sort(key=lambda item: -heavy[Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix()])


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request, monkeypatch):
    """A `unit` test that starts a process fails naming it (see PROCESSES); the emulated ones start qemu-user
    and stay out of make test-fast as such."""
    node = request.node
    if node.get_closest_marker("unit") is None or node.get_closest_marker("emulated") is not None:
        yield
        return
    started, real = [], subprocess.Popen.__init__

    def record(self, args, *rest, **kw):
        started.append(args if isinstance(args, str) else " ".join(map(str, args)))
        return real(self, args, *rest, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", record)
    yield
    assert not started, f"a unit test started {started[0][:200]!r}: list it in PROCESSES (tests/conftest.py)"


_HEARTH_LOGGER = logging.getLogger("hearth")
_PRISTINE_LOGGER = list(_HEARTH_LOGGER.handlers), _HEARTH_LOGGER.level


def _reset_hearth_logger():
    _HEARTH_LOGGER.handlers[:] = _PRISTINE_LOGGER[0]
    _HEARTH_LOGGER.setLevel(_PRISTINE_LOGGER[1])  # not .level =: setLevel clears the children's cached isEnabledFor


@pytest.fixture(autouse=True)
def _hearth_logger_restored():
    """hearth.cli's main configures the `hearth` logger (hearth.commands.logs): each test starts and leaves
    it as it was at import, so neither a test nor a module-scoped fixture that ran the CLI (its terminal
    handler printed every later test's warnings to stderr: counted twice there) sets it for the tests after."""
    _reset_hearth_logger()
    yield
    _reset_hearth_logger()


@pytest.fixture(scope="session")
def model_path():
    # read HEARTH_HOME once, at session start, so a test that points it at a temp dir
    # (monkeypatch) cannot make this cache hand out paths that are later deleted
    home = hearth_home()
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            cache[name] = resolve_model(name, home=home)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def gguf_py_reader(model_path):
    """`get(name)`: gguf-py's GGUFReader of a catalog model, parsed once per session: the reference
    parser builds an object per vocabulary entry (gemma3's 262K: ~8 s on 2 cores), and both the
    loader's and the planner's tests compare against it."""
    import gguf

    readers: dict[str, gguf.GGUFReader] = {}

    def get(name: str) -> gguf.GGUFReader:
        if name not in readers:
            readers[name] = gguf.GGUFReader(model_path(name))
        return readers[name]

    return get


@pytest.fixture(scope="session")
def smol_llm(model_path):
    """One SmolLM2-135M engine shared by the tests that only add requests to it."""
    from hearth import LLM

    # no max_logprobs cap: equivalence tests compare the top 1000 logprobs of two runs
    return LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=2048, max_logprobs=-1)


SPECULATION_OFF = "speculation is off on the torch tier (verify rows differ from decode rows there)"


@pytest.fixture
def native_speculation():
    """For a test whose model must speculate: skipped where hearth keeps speculation off (LLM.speculation_off)."""
    if tiers.active() == "torch":
        pytest.skip(SPECULATION_OFF)
