# rieszflow: two set-up commands for a fresh machine.
#   make run   creates .venv, installs rieszflow, runs the main job on the bundled data
#   make test  creates .venv with the dev and docs extras, runs the test suite (tests/test_docs_build.py builds small sites)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Threads: the rieszflow command applies its thread policy itself (src/rieszflow/engine/threads.py:
# one BLAS thread, Numba threads only for large kernel calls; measured by benchmarks/bench_threads.py).
# THREADS caps it at the 2 cores this project is measured on.
THREADS := RIESZFLOW_THREADS=2 NUMBA_NUM_THREADS=2

.PHONY: run test test-full venv clean results docs docs-check

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,docs]"
	touch $@

venv: $(VENV)/.installed

run: venv
	$(THREADS) $(VENV)/bin/rieszflow run

# Two pytest workers (pytest-xdist), one per core; --dist loadscope keeps each test module (and its
# module-scoped fixtures) on one worker. Paper 002's spec-size runs (marker full_size) are left to
# test-full: 347 s of pytest (6 min 28 s with the venv) on a fresh clone on the project's 2 cores,
# against 622 s with them (measured 2026-11-26, docs/performance.md).
test: venv
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=2 \
	  $(PY) -m pytest -q -n 2 --dist loadscope -m "not full_size" tests

# Also the acceptance tests at the specs' full sizes (marker full_size: paper 002's T1-T15 at the
# spec's sample sizes, about 400 CPU-seconds more); each has a reduced-size twin in `make test`.
test-full: venv
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=2 \
	  $(PY) -m pytest -q -n 2 --dist loadscope tests

# Regenerate every measured number of README and docs/ (docs/results/*.md) from stated runs:
# several hours on 2 cores (125 minutes before the luna pages, which add about 2 hours at the
# measured wall times). Each page names the files, their commands, commit and wall time.
RF := $(THREADS) $(VENV)/bin/rieszflow
results: venv
	mkdir -p runs docs/results
	$(RF) run --quiet --overwrite --out runs/rt-kernel-seed0.h5
	$(RF) run --vanilla --quiet --overwrite --out runs/rt-vanilla-seed0.h5
	$(RF) mean-field --quick --quiet --overwrite --out runs/mean_field-quick-seed0.h5
	$(RF) ldp --quick --quiet --overwrite --out runs/ldp-quick-seed0.h5
	$(RF) attention-theory --quick --quiet --overwrite --out runs/attention_theory-quick.h5
	$(RF) attention-theory --quiet --overwrite --out runs/attention_theory.h5
	$(RF) token-flow --quick --quiet --overwrite --out runs/token_flow-quick-seed0.h5
	$(RF) report runs/rt-kernel-seed0.h5 runs/rt-vanilla-seed0.h5 --overwrite --out docs/results/main_job.md \
	  --title "the main job and its matched baseline (paper 000, App. F.2), Rotten Tomatoes, seed 0"
	$(RF) gibbs-check runs/rt-kernel-seed0.h5 --quiet --overwrite --out runs/rt-kernel-seed0-gibbs.h5
	$(RF) report runs/rt-kernel-seed0-gibbs.h5 --overwrite --out docs/results/gibbs_check.md \
	  --title "the main job's Phase A particles against their Gibbs state"
	$(RF) report runs/mean_field-quick-seed0.h5 --overwrite --out docs/results/mean_field_quick.md \
	  --title "particles against the McKean-Vlasov PDE, --quick"
	$(RF) report runs/ldp-quick-seed0.h5 --overwrite --out docs/results/ldp_quick.md \
	  --title "large deviations of the particle Gibbs measure, --quick"
	$(RF) report runs/attention_theory-quick.h5 --overwrite --out docs/results/attention_theory_quick.md \
	  --title "paper 004's bounds measured, --quick"
	$(RF) report runs/attention_theory.h5 --overwrite --out docs/results/attention_theory.md \
	  --title "paper 004's bounds measured, full size"
	$(RF) report runs/token_flow-quick-seed0.h5 --overwrite --out docs/results/token_flow_quick.md \
	  --title "tokens as interacting particles on the sphere, --quick"
	$(RF) kernel-mean-field --quick --workers 2 --quiet --overwrite --out runs/kernel_mean_field-quick-seed0.h5
	$(RF) kernel-mean-field --quick --set problems=sine1d --set s_1d=0 --workers 2 --quiet --overwrite \
	  --out runs/kernel_mean_field-quick-log1d-seed0.h5
	$(RF) report runs/kernel_mean_field-quick-seed0.h5 runs/kernel_mean_field-quick-log1d-seed0.h5 --overwrite \
	  --out docs/results/kernel_mean_field_quick.md \
	  --title "kernel learning in mean field, --quick (and the 1-D log kernel)"
	$(RF) synthetic --quick --workers 2 --quiet --overwrite --out runs/synthetic-quick-seed0
	$(RF) report runs/synthetic-quick-seed0/benchmark/benchmark.h5 runs/synthetic-quick-seed0/ablation/ablation.h5 \
	  runs/synthetic-quick-seed0/runtime/runtime.h5 --overwrite --out docs/results/synthetic_quick.md \
	  --title "paper 000's synthetic benchmark (App. F.1), built methods, --quick"
	$(RF) nlp --quick --workers 2 --quiet --overwrite --out runs/nlp-quick-seed0
	$(RF) report runs/nlp-quick-seed0/nlp-rt/nlp-rt.h5 runs/nlp-quick-seed0/nlp-sst2/nlp-sst2.h5 --overwrite \
	  --out docs/results/nlp_quick.md --title "paper 000's NLP tables (Tables 1, 2, 6, 8), --quick"
	$(RF) kgd --quick --workers 2 --quiet --overwrite --out runs/kgd-quick-seed0
	$(RF) report runs/kgd-quick-seed0 --overwrite --out docs/results/kgd.md \
	  --title '`rieszflow kgd --quick` (paper 003: Table 2, asymptotics, Tables 3-6)'
	$(RF) kgd --workers 2 --quiet --overwrite --out runs/kgd-seed0
	$(RF) report runs/kgd-seed0 --overwrite --out docs/results/kgd_full.md \
	  --title '`rieszflow kgd` (paper 003, full protocol: 100 KRR repetitions)'
	$(RF) kgd --from-run runs/rt-kernel-seed0.h5 --overwrite
	$(RF) kgd --from-run runs/rt-vanilla-seed0.h5 --overwrite
	$(RF) report runs/rt-kernel-seed0-kgd.h5 runs/rt-vanilla-seed0-kgd.h5 --overwrite --out docs/results/kgd_learned.md \
	  --title "KGD of the learned kernels of the main job and its vanilla twin (paper 003 on paper 000's run)"
	# issue 23: verdicts at a size that decides (each a resumable sweep; the nlp power preset takes
	# CPU-hours: rerunning resumes it, and --report-only pages what is complete)
	$(RF) synthetic --preset power --workers 2 --quiet --no-plots --out runs/synthetic-power-seed0
	$(RF) report runs/synthetic-power-seed0/benchmark/benchmark.h5 --overwrite --out docs/results/synthetic_power.md \
	  --title "paper 000's synthetic benchmark (App. F.1) at a size that decides: --preset power, verdicts per sigma beside the Bayes ceiling"
	# the power sweep with its noise controls runs from a worktree of the tag evidence-nlp-power-1
	# (docs/sweeps.md, "Long runs from a pinned commit"); its task files so far are kept in
	# docs/results/data/nlp-power and copied in to resume; the page is rendered by today's code
	mkdir -p runs/nlp-power && cp -rn docs/results/data/nlp-power/. runs/nlp-power/
	# the tag evidence-nlp-power-1 is commit 13aa59b (named by hash: a clone may lack the tag)
	test -d ../pinned-nlp-power || git worktree add --detach ../pinned-nlp-power 13aa59b37cef252cde2b594cc0bd2d1b30ea268d
	cd ../pinned-nlp-power && PYTHONPATH=$$PWD/src $(THREADS) $(CURDIR)/$(PY) -m rieszflow nlp --preset power \
	  --workers 2 --quiet --no-plots --out $(CURDIR)/runs/nlp-power
	$(RF) nlp --preset power --out runs/nlp-power --report-only --quiet
	$(RF) report runs/nlp-power --out docs/results/nlp_power.md --overwrite \
	  --title "paper 000's central claim with power and its noise controls, one clean commit (rieszflow nlp --preset power at tag evidence-nlp-power-1), Rotten Tomatoes"
	# paper 004's Prop. 28 on the two-atom family, exact arithmetic (seconds)
	$(PY) -m rieszflow.theory.prop28 --md docs/results/prop28.md
	# the first power sweep (40 runs on 13 commits) and the Phase A grid: their task files are not
	# kept; the pages are re-analysed from the per-seed rows of the stored pages
	$(PY) scripts/reanalyse_power_page.py docs/results/source/nlp_power_13_commits.md --out docs/results/nlp_power_13_commits.md \
	  --title "paper 000's central claim with power, Rotten Tomatoes: the 40 runs of 2026-11 on 13 commits, re-analysed (issue 36)" --overwrite
	$(PY) scripts/reanalyse_power_page.py docs/results/source/nlp_phase_a_mixed_commits.md --out docs/results/nlp_phase_a_mixed_commits.md \
	  --title "where could Phase A matter? (rieszflow nlp --preset phase-a), Rotten Tomatoes: runs on mixed commits, re-analysed (issue 36)" --overwrite
	$(RF) mean-field --preset bias --workers 2 --quiet --out runs/mean_field-bias-seed0.h5
	$(RF) report runs/mean_field-bias-seed0.h5 --overwrite --out docs/results/mean_field_bias.md \
	  --title 'the O(1/N) mean-field bias against N, --preset bias' \
	  --notes docs/results/notes/mean_field_bias.md
	# issue 24: the antithetic estimator at large N, the ladder as far as 2 cores go (rows above n_max
	# are defined, not run; the direct pair sums in 2-D, where auto's NUFFT is slower at 2e4)
	$(RF) mean-field --preset bias-large --problem interval --set n_max=300000 --workers 2 --quiet \
	  --out runs/mean_field-bias-large-interval-seed0.h5
	$(RF) mean-field --preset bias-large --problem rectangle --set n_max=10000 --set interaction_method=numba \
	  --workers 2 --quiet --out runs/mean_field-bias-large-rectangle-seed0.h5
	# d = 2 again at half the step, for the step dependence of b row by row
	$(RF) mean-field --preset bias-large --problem rectangle --set n_max=10000 --set interaction_method=numba \
	  --set eta=0.0125 --workers 2 --quiet --out runs/mean_field-bias-large-rectangle-halfeta-seed0.h5
	# d = 2 to N = 1e5 with the preset's method auto (NUFFT sums from N = 1e4); the rows fill together,
	# so a run stopped early holds every N with fewer triples at the largest (CPU-hours to 32 at 1e5)
	$(RF) mean-field --preset bias-large --problem rectangle --set n_max=100000 --workers 2 --quiet \
	  --out runs/mean_field-bias-large-rectangle-1e5-seed0.h5
	# d = 3: the exact Coulomb kernel with the Metropolized step (session 7; it fails its m1 control),
	# then the preset's softened kernel (eps = 0.1) with Euler-Maruyama
	$(RF) mean-field --preset bias-large --problem box --set n_max=3000 --set softening=0 \
	  --set integrator=metropolized --workers 1 --quiet --out runs/mean_field-bias-large-box-seed0.h5
	$(RF) mean-field --preset bias-large --problem box --set n_max=10000 --workers 2 --quiet \
	  --out runs/mean_field-bias-large-box-softened-seed0.h5
	$(RF) report runs/mean_field-bias-large-interval-seed0.h5 runs/mean_field-bias-large-rectangle-seed0.h5 \
	  runs/mean_field-bias-large-rectangle-halfeta-seed0.h5 runs/mean_field-bias-large-rectangle-1e5-seed0.h5 \
	  runs/mean_field-bias-large-box-seed0.h5 runs/mean_field-bias-large-box-softened-seed0.h5 \
	  --overwrite --out docs/results/mean_field_bias_large.md \
	  --title 'the O(1/N) mean-field bias at N = 1e3..3e5, antithetic estimator, --preset bias-large' \
	  --notes docs/results/notes/mean_field_bias_large.md
	$(RF) luna --sweep dead_init --workers 2 --quiet --out runs/luna-dead-seed0
	$(RF) report runs/luna-dead-seed0 --overwrite --out docs/results/luna_dead_init.md \
	  --title '`rieszflow luna --sweep dead_init` (paper 001: dead psi channels at initialisation, Monte Carlo)'
	$(RF) luna --sweep p5 --workers 2 --quiet --set digits_steps=300 --set p5_seeds=1 \
	  --set p5_variants=rff_fixed,rff_pair_fixed --out runs/luna-p5-rff
	$(RF) report runs/luna-p5-rff --overwrite --out docs/results/luna_p5_rff.md \
	  --title '`rieszflow luna --sweep p5` with both fixed RFF baselines (paper 001 Table 5; proxy: Digits-seq, 300 steps, 1 seed)'
	$(RF) infinite-width --sweep e1_width --workers 2 --quiet --no-plots --out runs/infinite-width-e1-seed0
	$(RF) report runs/infinite-width-e1-seed0 --overwrite --out docs/results/infinite_width_e1.md \
	  --title '`rieszflow infinite-width --sweep e1_width` at the paper sizes (paper 002, E1: 10 trials x 50k)'
	# issue 24: the fast sums' page from its stored measurements (CPU-hours at N = 10^6; commands in the page)
	$(PY) benchmarks/bench_fast.py report --json docs/results/bench_fast.json --md docs/results/bench_fast.md
	$(PY) benchmarks/bench_riesz.py --threads 1 --md docs/results/bench_riesz.md --json docs/results/bench_riesz.json
	$(PY) benchmarks/bench_pde.py --threads 1 --md docs/results/bench_pde.md --json docs/results/bench_pde.json
	$(PY) benchmarks/bench_attention.py --large --k 3 --md docs/results/bench_attention.md --json docs/results/bench_attention.json
	$(PY) benchmarks/bench_alignment.py --threads 1 --md docs/results/bench_alignment.md --json docs/results/bench_alignment.json
	$(PY) benchmarks/bench_recording.py --threads 1 --md docs/results/bench_recording.md --json docs/results/bench_recording.json
	$(PY) benchmarks/bench_api.py --k 5 --md docs/results/bench_api.md --json docs/results/bench_api.json
	NUMBA_NUM_THREADS=2 $(PY) benchmarks/bench_threads.py --k 5 --md docs/results/bench_threads.md --json docs/results/bench_threads.json
	# the suite's peers (torch CPU, pykeops) come from the extra 'bench' (pyproject.toml); without
	# them their rows are skipped with the reason
	$(PY) -m benchmarks --threads 1 --k 7 --md docs/results/bench_suite.md --json docs/results/bench_suite.json \
	  --readme README.md
	for b in token_flow; do \
	  (echo "# Results: benchmarks/bench_$$b.py"; echo; echo 'Regenerated by `make results`; timings on a shared machine vary, the ratios are measured in one run.'; \
	   echo; echo '```text'; date -u +"measured %Y-%m-%dT%H:%M:%SZ, git $$(git rev-parse --short HEAD), $$(nproc) cores"; \
	   $(PY) benchmarks/bench_$$b.py; echo '```') > docs/results/bench_$$b.md; done
	$(RF) infinite-width --quick --workers 2 --quiet --overwrite --out runs/infinite-width-quick-seed0
	$(RF) report runs/infinite-width-quick-seed0 --overwrite --out docs/results/infinite_width_quick.md \
	  --title '`rieszflow infinite-width --quick` (paper 002)'
	$(RF) infinite-width --workers 2 --quiet --overwrite --out runs/infinite-width-seed0
	$(RF) report runs/infinite-width-seed0 --overwrite --out docs/results/infinite_width.md \
	  --title '`rieszflow infinite-width` at the paper sizes (paper 002)'
	$(RF) luna --quick --quiet --overwrite --out runs/luna-quick
	$(RF) report runs/luna-quick --overwrite --out docs/results/luna_quick.md \
	  --title '`rieszflow luna --quick`'
	$(RF) luna --sweep p2 --workers 1 --quiet --overwrite --out runs/luna-p2
	$(RF) report runs/luna-p2 --overwrite --out docs/results/luna_p2.md \
	  --title '`rieszflow luna --sweep p2 --workers 1`'
	$(RF) luna --sweep p3 --workers 2 --set p3_tasks=digits --set p3_methods=softmax,luna,cosformer,performer --set p3_seeds=3 --quiet --overwrite --out runs/luna-p3
	$(RF) report runs/luna-p3 --overwrite --out docs/results/luna_p3.md \
	  --title '`rieszflow luna --sweep p3 --workers 2 --set p3_tasks=digits --set p3_methods=softmax,luna,cosformer,performer --set p3_seeds=3`'
	$(RF) luna --sweep p3 --workers 2 --set p3_tasks=listops --set p3_methods=softmax,luna,cosformer,performer --set p3_seeds=1 --set listops_steps=800 --quiet --overwrite --out runs/luna-p3-listops
	$(RF) report runs/luna-p3-listops --overwrite --out docs/results/luna_p3_listops.md \
	  --title '`rieszflow luna --sweep p3 --workers 2 --set p3_tasks=listops --set p3_methods=softmax,luna,cosformer,performer --set p3_seeds=1 --set listops_steps=800`'
	$(RF) luna --sweep p7 --sweep p5 --sweep p4 --workers 1 --set digits_steps=300 --set p5_seeds=1 --set p4_steps=100 --quiet --overwrite --out runs/luna-ablations
	$(RF) report runs/luna-ablations --overwrite --out docs/results/luna_ablations.md \
	  --title '`rieszflow luna --sweep p7 --sweep p5 --sweep p4 --workers 1 --set digits_steps=300 --set p5_seeds=1 --set p4_steps=100`'
	$(RF) luna --sweep p6 --workers 1 --set digits_steps=300 --set p6_stage2_epochs=2 --quiet --overwrite --out runs/luna-p6
	$(RF) report runs/luna-p6 --overwrite --out docs/results/luna_p6.md \
	  --title '`rieszflow luna --sweep p6 --workers 1 --set digits_steps=300 --set p6_stage2_epochs=2`'
	$(RF) luna --sweep kernels --workers 1 --set digits_steps=300 --set text_steps=300 --set kernel_seeds=1 --quiet --overwrite --out runs/luna-kernels
	$(RF) report runs/luna-kernels --overwrite --out docs/results/luna_kernels.md \
	  --title '`rieszflow luna --sweep kernels --workers 1 --set digits_steps=300 --set text_steps=300 --set kernel_seeds=1`'
	cp runs/mean_field-quick-seed0_interval_w1_vs_N.png docs/img/mean_field_interval_w1_vs_N.png
	cp runs/mean_field-quick-seed0_interval_density.png docs/img/mean_field_interval_density.png
	for f in sine1d_w1_vs_N sine1d_free_energy sine2d_density sine2d_accuracy; do \
	  cp runs/kernel_mean_field-quick-seed0_$$f.png docs/img/kernel_mean_field_$$f.png; done
	for f in traces norms mmd; do cp runs/rt-kernel-seed0-gibbs_$$f.png docs/img/gibbs_check_$$f.png; done

# The documentation site (docs/, examples/): the API reference of every public name, the Markdown
# pages and results pages through MyST, and the gallery of examples/ executed on the CPU. Warnings
# are errors (-W, nitpicky cross-references; --keep-going reports them all). Output:
# docs/_build/html/index.html. `python scripts/check_site.py` then checks it in headless Chromium.
$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $@

docs: $(VENV)/.docs-installed
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=2 MPLBACKEND=agg \
	  $(PY) -m sphinx -b html -n -W --keep-going -j 2 docs docs/_build/html

clean:
	rm -rf $(VENV) .pytest_cache docs/_build docs/api/generated docs/auto_examples
