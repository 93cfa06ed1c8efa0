# `make run`: set up .venv and serve the default model on http://$(HOST):$(PORT) (chat page at /).
# `make test`: set up and run every test, the tier-sensitive ones once per CPU tier this machine runs.
# `make test-fast`: the unit tests only (no real model, server, browser or other process) but the emulated ones
# (Triton's interpreter, qemu-user: minutes of CPU), for the inner loop.
# `make test-arm`: the neon tier's kernels cross-compiled for aarch64 and run under qemu-user.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= smollm2-135m
HOST ?= 127.0.0.1
PORT ?= 8080
# root installs system packages directly, anyone else through sudo
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup run test test-fast test-arm arm-tools browser clean
setup: $(VENV)/.installed

# torch is installed on its own first so the exact pin (a CPU build where one is on local disk) wins.
# Under make test, with it what tests/prefetch.py imports (gguf, tqdm): it then compiles the kernels and
# downloads the models the tests read while pip installs the rest (one core each): on a fresh machine
# ~45 s of g++ (32 + 14 s CPU) and ~35 s of downloads that were on the first test pass's path. Fresh clone
# and HEARTH_HOME, 2026-12-05, other sessions' load 1-3: setup 77 s with the 54 s of g++ and 38 s of
# downloads inside it (setup alone: 63-71 s).
test: PREFETCH = $(BIN)/python -m tests.prefetch
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt torch $(if $(PREFETCH),gguf tqdm)
	$(if $(PREFETCH),$(PREFETCH) & pre=$$!;) $(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'; \
	  rc=$$?; $(if $(PREFETCH),wait $$pre;) exit $$rc
	touch $@

run: setup
	$(BIN)/hearth serve $(MODEL) --host $(HOST) --port $(PORT)

# The whole suite at the best tier (listing its slowest tests: where the time of the next make test goes),
# in WORKERS pytest-xdist processes (a test file's tests in one of them, so its module fixtures load
# once; 0: one process), and the `tiered` tests (kernels, logits vs transformers, goldens, engine
# equivalence, fidelity, planner layouts) at each other tier this CPU runs, forced with HEARTH_CPU_TIER
# (hearth/kernels/tiers.py). Every tier runs even after a failure; pytest's 5 (nothing collected under a
# narrow PYTEST_ARGS) is no failure.
# BESIDE=1 (the default; BESIDE=0: one pass after the other) runs the other tiers' passes beside the best
# tier's, one at a time, from a queue that the foreground also takes from once its pass ends; their
# reports follow it. Until 2026-12-06 the best tier ran in one pytest with the others at the idle
# scheduling class: a fresh clone on a quiet 2-core Zen 4 took 10 min 25 s for 14.4 CPU-min of work, one
# core idle most of the time (the tests are mostly one Python thread). With 2 workers: 9 min 40 s
# (the pass 8:36) for 15.7 CPU-min; 3 workers ran the pass in 8:50 on 17.4 CPU-min: it is CPU-bound now.
WORKERS ?= 2
TIERS = $(BIN)/python -m hearth.kernels.tiers
PYTEST = $(BIN)/python -m pytest -q
BESIDE ?= 1
test: setup browser
	@tiers="$$($(TIERS) runnable)" && [ -n "$$tiers" ] && $(TIERS) skipped || exit 1; status=0; \
	set -- $$tiers; best=$$1; shift; jobs="$$*"; bg=; dir=$$(mktemp -d) || exit 1; \
	run() { HEARTH_CPU_TIER=$$1 $(PYTEST) -m tiered --durations=10 --basetemp=$$dir/$$1 $(PYTEST_ARGS) \
	  >$$dir/$$1.log 2>&1; echo $$? >$$dir/$$1.rc; }; \
	take() { for t in $$jobs; do ! mkdir $$dir/$$t.taken 2>/dev/null || run $$t; done; }; \
	[ "$(BESIDE)" = 0 ] || { take & bg=$$!; }; \
	echo "== tier $$best: pytest --durations=25 -n $(WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)"; \
	HEARTH_CPU_TIER=$$best $(PYTEST) --durations=25 -n $(WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS); rc=$$?; \
	[ $$rc -eq 0 ] || [ $$rc -eq 5 ] || status=1; \
	take; [ -z "$$bg" ] || wait $$bg; for t in $$jobs; do \
	  echo "== tier $$t: pytest -m tiered $(PYTEST_ARGS)"; cat $$dir/$$t.log; \
	  rc=$$(cat $$dir/$$t.rc 2>/dev/null || echo 1); [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || status=1; done; \
	rm -rf $$dir; echo "tiers run: $$tiers"; exit $$status

# Bytecode for the test runs even where the environment turns it off (PYTHONDONTWRITEBYTECODE=1, as some sandboxes
# set): without __pycache__ every pytest process rewrites each test module's asserts and compiles hearth again,
# 27 CPU-s to collect the whole suite against ~10 (2026-12-07; the second run on a checkout gains).
test test-fast test-arm: export PYTHONDONTWRITEBYTECODE :=

test-fast: setup
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder -m "unit and not emulated" $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The neon tier on this (x86) machine: both its builds (plain NEON, +dotprod) cross-compiled with Debian's
# aarch64 g++ and their kernel tests run under qemu-user (tests/arm). `make test` runs the plain build's
# where the tools are present (~20 s of CPU, ~10 once built), else skips naming the missing tool; this target installs them.
test-arm: setup arm-tools
	HEARTH_NEON_BUILDS="plain dotprod" $(BIN)/python -m pytest -q tests/arm $(PYTEST_ARGS)

arm-tools:
	@command -v aarch64-linux-gnu-g++ >/dev/null && command -v qemu-aarch64 >/dev/null || \
	  { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++-aarch64-linux-gnu qemu-user; } || \
	  { echo "error: could not install g++-aarch64-linux-gnu + qemu-user (Debian/Ubuntu packages)"; exit 1; }

# the chat-page test drives Debian's headless chromium; install it when missing (the test is
# skipped only where it cannot be installed)
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } || \
	  echo "warning: could not install chromium + chromium-driver; the chat page test will be skipped"

clean:
	rm -rf $(VENV) build *.egg-info
