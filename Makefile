# `make run`: set up .venv and serve the default model on http://$(HOST):$(PORT) (chat page at /).
# `make test`: set up and run every test, the tier-sensitive ones once per CPU tier this machine runs.
# `make test-fast`: the unit tests only (no real model, server or browser) but the emulated ones (Triton's
# interpreter, qemu-user: minutes of CPU), for the inner loop.
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
# then the `tiered` tests (kernels, logits vs transformers, goldens, engine equivalence, fidelity, planner layouts) at each
# other tier this CPU runs, forced with HEARTH_CPU_TIER (hearth/kernels/tiers.py). One pass at a time: two
# side by side on 2 cores took 20 min against 14 (2026-12-05). Every tier runs even after a failure;
# pytest's 5 (nothing collected under a narrow PYTEST_ARGS) is no failure.
# BESIDE=1 (BESIDE=0: one pass at a time) runs the emulated tests (single-threaded: Triton's
# interpreter, qemu-user) as a second pytest beside the passes, at the idle scheduling class (nice 19
# without chrt), on the core those leave idle; the first pass then runs -m "not(emulated)", and the emulated
# run's report follows the last pass. Fresh clone, quiet 2-core AMX machine, 2026-12-05: 10 min 38 s in all
# (setup included), the emulated run's 2:19 done inside the amx pass's 7:14.
# BESIDE=tiers (the default): the other tiers' passes go there too, after the emulated run, so the best
# tier's pass is the only one in the foreground (what is left of the idle-class runs when it ends runs at
# full speed); their reports follow it, in order. Fresh clone, empty HEARTH_HOME (models downloaded and
# kernels compiled inside), quiet 2-core AMX machine, 2026-12-05, with the tests' OpenMP workers sleeping
# between parallel regions (tests/conftest.py): 8 min 12 s in all, the amx pass 6:50 (10:35-11:13 before).
# The beside passes are a queue that both sides take from: once the best tier's pass ends, the
# foreground takes the next pass the background has not started (at normal priority), so the last two
# run side by side instead of one after the other with a core idle.
# WORKERS: the best tier's pass runs in this many pytest-xdist processes (a test file's tests in one of
# them, so its module fixtures load once): alone, one pytest left a core idle most of the pass (fresh
# clone, 2026-12-06: 14.4 CPU-min over 10.4 min of wall for the whole make test). 0: one process.
WORKERS ?= 2
TIERS = $(BIN)/python -m hearth.kernels.tiers
PYTEST = $(BIN)/python -m pytest -q
BESIDE ?= tiers
IDLE := $(shell command -v chrt >/dev/null && chrt -i 0 true 2>/dev/null && echo "chrt -i 0" || echo "nice -n 19")
test: setup browser
	@tiers="$$($(TIERS) runnable)" && [ -n "$$tiers" ] && $(TIERS) skipped || exit 1; status=0; \
	set -- $$tiers; fg="$$tiers"; sel="--durations=25 -n $(WORKERS) --dist loadfile"; bg=; jobs=; dir=; \
	run() { j=$$1; shift; HEARTH_CPU_TIER=$${j#*:} "$$@" $(PYTEST) -m $${j%%:*} --durations=10 \
	  --basetemp=$$dir/$$j $(PYTEST_ARGS) >$$dir/$$j.log 2>&1; echo $$? >$$dir/$$j.rc; }; \
	take() { for j in $$jobs; do ! mkdir $$dir/$$j.taken 2>/dev/null || run $$j "$$@"; done; }; \
	if [ "$(BESIDE)" != 0 ]; then \
	  dir=$$(mktemp -d) || exit 1; jobs="emulated:$$1"; sel="$$sel -m not(emulated)"; \
	  if [ "$(BESIDE)" = tiers ]; then fg=$$1; shift; for t in "$$@"; do jobs="$$jobs tiered:$$t"; done; fi; \
	  take $(IDLE) & bg=$$!; fi; \
	for t in $$fg; do \
	  echo "== tier $$t: pytest $$sel $(PYTEST_ARGS)"; \
	  HEARTH_CPU_TIER=$$t $(PYTEST) $$sel $(PYTEST_ARGS); rc=$$?; \
	  [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || status=1; sel="-m tiered"; \
	done; \
	if [ -n "$$bg" ]; then take; wait $$bg; for j in $$jobs; do \
	  echo "== tier $${j#*:}, beside the passes: pytest -m $${j%%:*} $(PYTEST_ARGS)"; cat $$dir/$$j.log; \
	  rc=$$(cat $$dir/$$j.rc 2>/dev/null || echo 1); [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || status=1; done; rm -rf $$dir; fi; \
	echo "tiers run: $$tiers"; exit $$status

test-fast: setup
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile -m "unit and not emulated" $(PYTEST_ARGS) || [ $$? -eq 5 ]

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
