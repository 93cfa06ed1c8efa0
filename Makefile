# `make run`: set up .venv and serve the default model on http://$(HOST):$(PORT) (chat page at /).
# `make test`: set up and run every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= smollm2-135m
HOST ?= 127.0.0.1
PORT ?= 8080
# root installs system packages directly, anyone else through sudo
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup run test browser clean
setup: $(VENV)/.installed

# torch is installed on its own first so the exact pin (a CPU build where one is on local disk) wins.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt torch
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'
	touch $@

run: setup
	$(BIN)/hearth serve $(MODEL) --host $(HOST) --port $(PORT)

test: setup browser
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# the chat-page test drives Debian's headless chromium; install it when missing (the test is
# skipped only where it cannot be installed)
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } || \
	  echo "warning: could not install chromium + chromium-driver; the chat page test will be skipped"

clean:
	rm -rf $(VENV) build *.egg-info
