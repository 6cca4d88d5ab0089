# rieszflow: two set-up commands for a fresh machine.
#   make run   creates .venv, installs rieszflow, runs the main job on the bundled data
#   make test  creates .venv with the dev extra, runs the test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Pin BLAS and Numba threads so results and timings are not at the mercy of a noisy shared machine.
THREADS := OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2 NUMBA_NUM_THREADS=2

.PHONY: run test venv clean results

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

# Regenerate every measured number of README and docs/ (docs/results/*.md) from stated runs:
# about 15 minutes on 2 cores. Each page names the files, their commands, commit and wall time.
RF := $(THREADS) $(VENV)/bin/rieszflow
results: venv
	mkdir -p runs docs/results
	$(RF) run --quiet --overwrite --out runs/rt-kernel-seed0.h5
	$(RF) run --vanilla --quiet --overwrite --out runs/rt-vanilla-seed0.h5
	$(RF) mean-field --quick --quiet --overwrite --out runs/mean_field-quick-seed0.h5
	$(RF) ldp --quick --quiet --overwrite --out runs/ldp-quick-seed0.h5
	$(RF) attention-theory --quick --quiet --overwrite --out runs/attention_theory-quick.h5
	$(RF) token-flow --quick --quiet --overwrite --out runs/token_flow-quick-seed0.h5
	$(RF) report runs/rt-kernel-seed0.h5 runs/rt-vanilla-seed0.h5 --overwrite --out docs/results/main_job.md \
	  --title "the main job and its matched baseline (paper 000, App. F.2), Rotten Tomatoes, seed 0"
	$(RF) report runs/mean_field-quick-seed0.h5 --overwrite --out docs/results/mean_field_quick.md \
	  --title "particles against the McKean-Vlasov PDE, --quick"
	$(RF) report runs/ldp-quick-seed0.h5 --overwrite --out docs/results/ldp_quick.md \
	  --title "large deviations of the particle Gibbs measure, --quick"
	$(RF) report runs/attention_theory-quick.h5 --overwrite --out docs/results/attention_theory_quick.md \
	  --title "paper 004's bounds measured, --quick"
	$(RF) report runs/token_flow-quick-seed0.h5 --overwrite --out docs/results/token_flow_quick.md \
	  --title "tokens as interacting particles on the sphere, --quick"
	$(RF) synthetic --quick --workers 2 --quiet --overwrite --out runs/synthetic-quick-seed0
	$(RF) report runs/synthetic-quick-seed0/benchmark/benchmark.h5 --overwrite --out docs/results/synthetic_quick.md \
	  --title "paper 000's synthetic benchmark (App. F.1), built methods, --quick"
	cp runs/mean_field-quick-seed0_interval_w1_vs_N.png docs/img/mean_field_interval_w1_vs_N.png
	cp runs/mean_field-quick-seed0_interval_density.png docs/img/mean_field_interval_density.png

clean:
	rm -rf $(VENV) .pytest_cache
