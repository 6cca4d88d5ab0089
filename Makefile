# rieszflow: two set-up commands for a fresh machine.
#   make run   creates .venv, installs rieszflow, runs the main job on the bundled data
#   make test  creates .venv with the dev extra, runs the test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Pin BLAS and Numba threads so results and timings are not at the mercy of a noisy shared machine.
THREADS := OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2 NUMBA_NUM_THREADS=2

.PHONY: run test venv clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

venv: $(VENV)/.installed

run: venv
	$(THREADS) $(VENV)/bin/rieszflow run

test: venv
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=2 \
	  $(PY) -m pytest -q tests

clean:
	rm -rf $(VENV) .pytest_cache
