# The two commands of the README: `make demo` (the main job on the embedded defaults) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo demo-train serve test test-slow lint typecheck bench clean weights

install: $(STAMP)

# torch first, pinned to the CPU wheel on local disk; any other spec would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The main job on the embedded models: a clip of the built-in world in, its next states and frames out,
# compared with the world's ground truth (outputs in runs/demo/).
demo: install
	$(BIN)/semworld world generate --scenario bounce --clips 1 --split test --seed 0 --out runs/demo/world --no-progress
	$(BIN)/semworld predict runs/demo/world/clips/000000.mp4 --stride 5 --context 8 --horizon 4 \
		--truth runs/demo/world/states.jsonl --out runs/demo/predict

# A short training run of the 4-tensor predictor on world state sequences, then a rollout (about a minute).
demo-train: install
	$(BIN)/semworld demo

serve: install
	$(BIN)/semworld serve

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check . || true

typecheck: install
	$(BIN)/mypy

test: install
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: install
	$(BIN)/python -m pytest -q -m slow

# Rebuild every shipped model in weights/ from scratch (seeded; rerun to resume from runs/weights/).
weights: install
	$(BIN)/semworld train all --out weights --run-dir runs/weights

bench: install
	$(BIN)/python bench/predictor_speed.py
	$(BIN)/python bench/pipeline_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
