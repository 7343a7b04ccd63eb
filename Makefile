# The two commands of the README: `make demo` (the main job on the embedded defaults) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: constraints install demo demo-train serve test test-unit test-slow lint typecheck bench clean weights

install: $(STAMP)

# torch first, from an explicit source. TORCH_INDEX_URL empty: pip's own configuration decides (here and in CI
# it finds the CPU wheel on local disk; on a fresh Linux box with plain PyPI that is the multi-GB CUDA build).
# CPU only:  make demo TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# CUDA:      make demo TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130   (or cu128, cu126)
TORCH_VERSION ?= 2.13.0
TORCH_INDEX_URL ?=
TORCH_SOURCE := $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL),)
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==$(TORCH_VERSION) $(TORCH_SOURCE)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The main job on the embedded models: a clip of the built-in world in, its next states and frames out,
# compared with the world's ground truth (outputs in runs/demo/predict/). The thread count is fixed so that the
# frames are the same bytes on every machine (a float sum's last bit depends on how many threads split it).
demo: install
	$(BIN)/semworld world generate --scenario bounce --clips 1 --split test --seed 0 --out runs/demo/world --no-progress
	$(BIN)/semworld predict runs/demo/world/clips/000000.mp4 --stride 5 --context 8 --horizon 4 --threads 2 \
		--truth runs/demo/world/states.jsonl --out runs/demo/predict

# A short training run of the 4-tensor predictor on world state sequences, then a rollout (about a minute).
demo-train: install
	$(BIN)/semworld demo

serve: install
	$(BIN)/semworld serve

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "not slow"

# The unit tests alone: no shipped weights, servers or subprocesses (a quick check while editing).
test-unit: install
	$(BIN)/python -m pytest -q -m "not slow and not integration"

test-slow: install
	$(BIN)/python -m pytest -q -m slow

# Rebuild every shipped model in weights/ from scratch (seeded; rerun to resume from runs/weights/).
weights: install
	$(BIN)/semworld train all --out weights --run-dir runs/weights
	$(BIN)/semworld train all --domain pong --stages captioner,renderer,predictor --out weights/pong --run-dir runs/weights-pong
	$(BIN)/semworld train all --domain freeway --stages captioner,renderer,predictor --out weights/freeway --run-dir runs/weights-freeway

bench: install
	$(BIN)/python -m bench.predictor_speed
	$(BIN)/python -m bench.pipeline_speed

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

# docker/constraints.txt: the image's Python pins, from this working environment (torch comes from TORCH_FLAVOUR).
constraints: install
	{ sed -n '1,3p' docker/constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -v -i '^semworld\|^torch==\|^nvidia-\|^triton==\| @ '; } > docker/constraints.txt.new
	mv docker/constraints.txt.new docker/constraints.txt
