# `make run`: set up .venv and chat with the default model.  `make test`: set up and run every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= smollm2-135m

.PHONY: setup run test clean
setup: $(VENV)/.installed

# torch is installed on its own first so the exact pin (a CPU build where one is on local disk) wins.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt torch
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'
	touch $@

run: setup
	$(BIN)/hearth run $(MODEL)

test: setup
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
