# rl_notes: `make test` is the test command CI runs first (.ci/run); `make demo` is the main job; `make help` (the default
# goal) lists every target with the `## ` description on its line.
SHELL := /bin/bash
.DEFAULT_GOAL := help
MAKEFILE := $(lastword $(MAKEFILE_LIST))
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
# A CPU build of torch that installs from local disk on the project's machines; any torch >= 2.13 (the declared floor,
# settings.ini) works, CPU or CUDA.
TORCH_SPEC ?= torch==2.13.0
NB_WORKERS ?= 2

.PHONY: help figures venv test test-nb test-py test-gpu-dry test-slow test-floors sync-check lint export execute demo bench docs docs-test gpu-check gpu-wheels fingerprint

# Every target with a `## ` description on its line, in the order of this file.
help: ## this list
	@grep -E '^[a-zA-Z0-9_.-]+:.*## ' "$(MAKEFILE)" | sed -E 's/^([^:]+):.*## (.*)$$/\1\t\2/' | awk -F'\t' '{printf "  %-14s %s\n", $$1, $$2}'

$(VENV)/.installed: setup.py settings.ini
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)" || $(PY) -m pip install -q "torch>=2.13"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

venv: $(VENV)/.installed ## the venv (.venv): torch, then the package editable with [dev]

# Fails if nbdev_export or nbdev_clean would change any file or the wheel's version is not settings.ini's, then
# pyflakes, the notebooks and pytest.
test: venv sync-check lint test-nb test-py test-gpu-dry ## what CI runs first: sync-check, lint, test-nb, test-py, test-gpu-dry

sync-check: venv ## nbdev_export / nbdev_clean change nothing; README and the wheel's version in sync
	PATH=$(BIN):$$PATH bash .ci/sync_check.sh

test-nb: venv ## run the notebooks (nbdev_test; #| slow, gpu and notest cells skipped)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/nbdev_test --n_workers $(NB_WORKERS) --timing

# --durations: the 15 slowest tests (markers torchrun, many_runs, wheel, slow: `pytest -m "not torchrun"` etc. skips them
# by hand; make test runs them all).
test-py: venv ## pytest over tests/, with the 15 slowest tests
	$(BIN)/pytest -q tests --durations=15

# The GPU check's dry run (seconds): without CUDA every part of .ci/gpu_check.py is prepared (the notebook cells it runs are
# found and compiled) and recorded as skipped; its runner logic is tested in tests/test_gpu_check.py (part of test-py).
test-gpu-dry: venv ## the GPU check's and the GPU notebook cells' dry runs without CUDA (seconds)
	$(PY) .ci/gpu_check.py --out build/gpu_check_dry
	$(PY) .ci/gpu_cells.py --dry

# On a CUDA machine: CUDA tests, the trainer's #| gpu cell, GRPO step / generation vs TRL and HF, the log-prob kernel at
# V = 151936, a short D3 run; one JSON and one log under $$OUT (default ./gpu_check_out). No venv needed: the device
# machine runs it as `bash .ci/gpu_run.sh` (see .ci/gpu_wheels.txt), which unpacks the carried wheels first.
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
gpu-check: ## on a CUDA machine: the GPU check (JSON and log under $OUT)
	$(GPU_PY) .ci/gpu_check.py

# The wheels the GPU machine lacks, packed into .whl/gpu_site.tar.xz for the run tool's carry (.ci/gpu_wheels.txt).
gpu-wheels: ## pack the wheels the GPU machine lacks into .whl/gpu_site.tar.xz
	bash .ci/gpu_wheels.sh

# pyflakes over the library (the generated _modidx.py excepted) and the build/CI/docs scripts; the library's lines fit
# in 120 characters (.ci/width.py: nbdev's __all__ list excepted; a long line is fixed in its notebook cell).
LINT_FILES = $(filter-out rl_notes/_modidx.py,$(wildcard rl_notes/*.py)) setup.py $(wildcard .ci/*.py docs/*.py)
lint: venv ## pyflakes over the library and the build/CI/docs scripts; library lines <= 120 characters
	$(PY) -m pyflakes $(LINT_FILES)
	$(PY) .ci/width.py

# The declared floors of torch, transformers and accelerate (settings.ini) in a fresh venv (build/floors-venv), the
# package installed from its wheel, then load + generate + two train steps (.ci/floors.sh; a few minutes).
test-floors: ## the declared dependency floors in a fresh venv (a few minutes)
	bash .ci/floors.sh

# The notebook cells that draw a figure but hold no image in the committed notebook (exit 1 if any).
figures: ## list notebook cells that draw a figure but hold no image (exit 1 if any)
	python3 .ci/figures.py

# Slow cells (minutes each on a 2-core CPU): the experiments behind the committed outputs.
test-slow: venv ## the #| slow notebook cells (minutes each)
	$(BIN)/nbdev_test --flags slow --n_workers 1 --timing

export: venv ## nbdev_clean, nbdev_export and README.md from the notebooks
	$(BIN)/nbdev_clean && $(BIN)/nbdev_export && $(PY) .ci/readme.py

# Execute notebooks in place, outputs and images kept (.ci/execute_nb.py): NB is one or more notebooks; FLAGS also runs the
# cells with those flags (slow,gpu); CELLS runs, of the flagged cells, only these indices. The notebook is written only if
# every cell ran. E.g. `make execute NB=nbs/12_dapo.ipynb FLAGS=slow CELLS=58,60`.
ifneq ($(filter execute,$(MAKECMDGOALS)),)
ifeq ($(strip $(NB)),)
$(error usage: make execute NB=nbs/12_dapo.ipynb [FLAGS=slow[,gpu]] [CELLS=3,5])
endif
endif
execute: venv ## execute notebooks in place: NB=nbs/12_dapo.ipynb [FLAGS=slow] [CELLS=3,5]
	$(PY) .ci/execute_nb.py $(NB) $(if $(FLAGS),--flags $(FLAGS)) $(if $(CELLS),--cells $(CELLS))

# Benchmarks print ratios against a baseline measured in the same run (bench_core needs ~12 GB of RAM).
bench: venv ## the benchmarks (ratios against a baseline of the same run)
	set -e; for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f; done

# The behaviour fingerprint behind the cache keys (rl_notes.fingerprint): per kind its micro runs, rows, key and seconds, and
# the fields no micro run exercises, with the reason. Memoised under the cache root: computed once per source version.
fingerprint: venv ## the behaviour fingerprint behind the cache keys, per kind
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -c "from rl_notes.fingerprint import report; print(report())"

demo: venv ## the demo: SFT, GRPO and DAPO runs into runs/demo
	$(BIN)/rl_notes demo --out runs/demo

# Docs site (see docs/README.md): Sphinx + myst-nb build of the notebooks into site/, and a headless-chromium test.
$(VENV)/.docs-installed: docs/requirements.txt $(VENV)/.installed
	$(PY) -m pip install -q -r docs/requirements.txt
	touch $@

docs: venv $(VENV)/.docs-installed ## the docs site (Sphinx + myst-nb) into site/
	$(PY) docs/build.py

docs-test: docs ## build the docs site and test it in headless chromium
	$(PY) docs/test_site.py
