# The two commands of the README: `make demo` (the main job on the embedded defaults) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-slow lint typecheck bench clean weights

install: $(STAMP)

# torch first, pinned to the CPU wheel on local disk; any other spec would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: install
	$(BIN)/semworld demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check . || true

typecheck: install
	$(BIN)/mypy

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: install
	$(BIN)/python -m pytest -q -m slow

# Rebuild every shipped model in weights/ from scratch (seeded; rerun to resume from runs/weights/).
weights: install
	$(BIN)/python -m pipeline.train_all --out weights --run-dir runs/weights

bench: install
	$(BIN)/python bench/predictor_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
