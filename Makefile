# PyTorch Source Reading: `make lab` to read, `make test` to check. `make help` lists the rest.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
KERNEL := pytorch-source-reading
NB ?= notebooks/*.ipynb
STAMP := $(VENV)/.installed
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# reveal.js for `make slides` (offline: copied next to the slides), from npm into the venv
REVEAL_VERSION := 4.6.1
REVEAL_DIR := $(VENV)/share/reveal.js
REVEAL_STAMP := $(REVEAL_DIR)/.installed-$(REVEAL_VERSION)
# the Jupyter widgets HTML manager and RequireJS for the book's step viewers, from npm
WIDGETS_DIR := $(VENV)/share/widgets-html-manager
HTML_MANAGER_VERSION := 1.0.15
REQUIREJS_VERSION := 2.3.7
WIDGETS_STAMP := $(WIDGETS_DIR)/.installed-$(HTML_MANAGER_VERSION)-$(REQUIREJS_VERSION)
# pytest-xdist: one worker per core; each test file and each notebook runs whole on one worker,
# longest first (conftest.py: the units, their order, the files that share a build)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PARALLEL := -n $(JOBS) --dist loadfile --no-loadscope-reorder
TIMINGS := _build/timings

.PHONY: help lab student student-lab student-check test test-lax unit execute zh course map lint bench system-deps slides-deps widgets-deps book \
	slides present slurm-check clean timings

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# what both environments do after pip: the project kernel, and JupyterLab settings for this
# environment (no "fetch Jupyter news?" prompt, no update check)
define kernel_and_settings
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) \
		--display-name "Python 3 (PyTorch Source Reading)" >/dev/null
	mkdir -p $(VENV)/share/jupyter/lab/settings
	echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' \
		> $(VENV)/share/jupyter/lab/settings/overrides.json
endef

$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# the venv's own pip installs every pin (no pip self-upgrade: one download less)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.txt -e .
	$(kernel_and_settings)
	touch $(STAMP)

# The student environment (issue 37): what the notebooks need, not the developer toolchain, in the
# same .venv (a later `make lab` or `make test` adds the rest). On Linux, PyPI's torch is the CUDA
# build; TORCH_INDEX=https://download.pytorch.org/whl/cpu (the dev container sets it) adds
# PyTorch's CPU-only wheels, whose `2.13.0+cpu` pip prefers to PyPI's `2.13.0`.
TORCH_INDEX ?=
STUDENT_STAMP := $(VENV)/.student
$(STUDENT_STAMP): requirements-student.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-student.txt -e . \
		$(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX),)
	$(kernel_and_settings)
	touch $(STUDENT_STAMP)

# CI (.ci/run): the student environment from nothing, in its own folder, running 05 and 12
STUDENT_CHECK_VENV := _build/student-venv
student-check: ## build the student environment from nothing (_build/student-venv) and run notebooks 05 and 12 in it
	rm -rf $(STUDENT_CHECK_VENV)
	$(MAKE) --no-print-directory student VENV=$(STUDENT_CHECK_VENV)
	$(STUDENT_CHECK_VENV)/bin/python tools/student_check.py

student: $(STUDENT_STAMP) ## the student environment only (requirements-student.txt): the notebooks, no test or docs tools
student-lab: $(STUDENT_STAMP) ## JupyterLab at the orientation notebook on the student environment
	$(BIN)/jupyter lab --notebook-dir=notebooks --ip=$(LAB_IP) $(ROOT_FLAG) \
		--LabApp.default_url=/lab/tree/00_orientation.ipynb

# Debian packages: headless Chromium (the browser tests) and npm (reveal.js for the slides)
APT_NEEDS = $(if $(shell command -v chromium || command -v chromium-browser),,chromium) \
	$(if $(shell command -v npm),,npm) \
	$(if $(shell fc-list :lang=zh family 2>/dev/null),,fonts-noto-cjk)

system-deps: ## install what pip cannot (headless Chromium and a CJK font for the browser tests, npm for reveal.js and the widget manager)
	@[ -z "$(strip $(APT_NEEDS))" ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_NEEDS) >/dev/null; \
	  elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then \
	    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_NEEDS) >/dev/null; \
	  else echo "warning: cannot install $(APT_NEEDS) without apt-get: the browser and slides tests will be skipped"; fi; }

slides-deps: $(REVEAL_STAMP) ## install reveal.js (npm, pinned) into the venv for `make slides`

# order-only on the venv: a change of requirements.txt does not reinstall reveal.js (a new venv
# has no reveal.js folder, so it is installed then)
$(REVEAL_STAMP): | $(STAMP) system-deps
	@if ! command -v npm >/dev/null; then \
	  echo "warning: no npm (Debian: apt-get install npm): no reveal.js, the slides test will be skipped"; \
	else \
	  rm -rf $(REVEAL_DIR) && mkdir -p $(REVEAL_DIR) && \
	  npm install --prefix $(REVEAL_DIR) --no-save --no-package-lock --no-audit --no-fund \
	    --loglevel=error reveal.js@$(REVEAL_VERSION) && touch $(REVEAL_STAMP); fi

widgets-deps: $(WIDGETS_STAMP) ## install the Jupyter widgets HTML manager (npm, pinned) into the venv for the book

$(WIDGETS_STAMP): | $(STAMP) system-deps
	@if ! command -v npm >/dev/null; then \
	  echo "warning: no npm (Debian: apt-get install npm): the book's step viewers show their text twins, their test is skipped"; \
	else \
	  rm -rf $(WIDGETS_DIR) && mkdir -p $(WIDGETS_DIR) && \
	  npm install --prefix $(WIDGETS_DIR) --no-save --no-package-lock --no-audit --no-fund \
	    --loglevel=error @jupyter-widgets/html-manager@$(HTML_MANAGER_VERSION) \
	    requirejs@$(REQUIREJS_VERSION) && touch $(WIDGETS_STAMP); fi

# 127.0.0.1 on your machine; a dev container forwards the port, so it listens on 0.0.0.0 there
LAB_IP ?= 127.0.0.1
lab: $(STAMP) ## open the notebooks in JupyterLab at the orientation notebook (http://127.0.0.1:8888)
	$(BIN)/jupyter lab --notebook-dir=notebooks --ip=$(LAB_IP) $(ROOT_FLAG) \
		--LabApp.default_url=/lab/tree/00_orientation.ipynb

test: $(STAMP) system-deps slides-deps widgets-deps ## unit tests + every notebook re-executed and diffed (strict nbval)
	$(BIN)/python -m pytest $(PARALLEL) --nbval -q tests notebooks

test-lax: $(STAMP) system-deps slides-deps widgets-deps ## same, comparing only asserts (GPU machines, other torch versions)
	$(BIN)/python -m pytest $(PARALLEL) --nbval-lax -q tests notebooks

.PHONY: test-gpu
test-gpu: $(STAMP) ## on a GPU machine: every notebook (--nbval-lax, NCCL with 2+ GPUs) and the audited workers for real; _build/gpu-report.md
	$(BIN)/python tools/gpu_check.py

unit: $(STAMP) slides-deps widgets-deps ## unit tests only
	$(BIN)/python -m pytest $(PARALLEL) -q tests

.PHONY: one
one: $(STAMP) system-deps slides-deps widgets-deps ## one notebook (NB=05): strict nbval of it and its twin, its helpers' tests, its cases of the suite
	$(BIN)/python tools/one.py "$(NB)" --jobs $(JOBS)

timings: $(STAMP) system-deps slides-deps widgets-deps ## make test, timed: wall and CPU per test file and notebook (_build/timings.md)
	rm -rf $(TIMINGS)
	$(BIN)/python -m pytest $(PARALLEL) --nbval -q -p tools.timings --timings-out=$(TIMINGS) \
		tests notebooks; status=$$?; \
	$(BIN)/python tools/timings.py $(TIMINGS) --items 25 --label "make timings, JOBS=$(JOBS), $$(date -u +%F)" \
		--weights $(TIMINGS)/weights.json > $(TIMINGS).md; cat $(TIMINGS).md; \
	echo "per-file weights for conftest.py's order: cp $(TIMINGS)/weights.json tools/test_weights.json"; \
	exit $$status

# nbconvert stops at a failing cell unless it is tagged raises-exception: tag the cells marked
# for nbval first. nbstripout keeps outputs *and* counts (nbval skips cells without a count).
TAG_RAISES := import nbformat, sys; nb = nbformat.read(sys.argv[1], 4); \
  [c.metadata.setdefault("tags", []).append("raises-exception") for c in nb.cells \
   if c.cell_type == "code" and "NBVAL_RAISES_EXCEPTION" in c.source \
   and "raises-exception" not in c.metadata.get("tags", [])]; nbformat.write(nb, sys.argv[1])

execute: $(STAMP) ## re-run notebooks in place to refresh stored outputs (NB=path to pick one)
	for nb in $(NB); do \
	  $(BIN)/python -c '$(TAG_RAISES)' $$nb && \
	  $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.kernel_name=$(KERNEL) \
	    --CoalesceStreamsPreprocessor.enabled=True $$nb || exit 1; \
	  $(BIN)/nbstripout --keep-output --keep-count --keep-id $$nb && \
	  $(BIN)/python tools/slides.py apply $$nb || exit 1; \
	done
	$(BIN)/python tools/zh.py build  # the Chinese twins carry the same code and outputs

zh: $(STAMP) ## sync the Chinese catalogs (locale/zh) with the English notebooks, regenerate notebooks/zh
	$(BIN)/python tools/zh.py all

course: $(STAMP) ## 00's table, the README tables and the book index from notebooks/course.toml (NB=path: also those notebooks' Prerequisites)
	$(BIN)/python tools/course.py docs
	$(if $(filter-out notebooks/*.ipynb,$(NB)),$(BIN)/python tools/course.py prereqs $(NB))
	$(BIN)/python tools/course.py check

# Graded assignments (issue 37): an nbgrader 0.9 course folder for one course path, in English and
# Chinese, from the notebooks, their judges and solutions/ (tools/assign.py; docs/teaching.md).
# COURSE_PATH names the path (not PATH, which make passes to the shell): its slug or a word of it.
COURSE_PATH ?=
ASSIGNMENTS_OUT ?= _build/assignments
.PHONY: assignments
assignments: $(STAMP) ## nbgrader assignment of a course path, en + zh (COURSE_PATH=compile|distributed|onnx|parallelism|capstone)
	@test -n "$(COURSE_PATH)" || { echo "usage: make assignments COURSE_PATH=compile (or distributed, onnx, parallelism, capstone)"; exit 2; }
	$(BIN)/python tools/assign.py build $(COURSE_PATH) --out $(ASSIGNMENTS_OUT)

map: $(STAMP) ## docs/code_map.md: notebook sections -> helpers -> tests, judges, catalogs, from the code
	$(BIN)/python tools/code_map.py

book: $(STAMP) widgets-deps ## the rendered book of every notebook from its stored outputs, in _build/book
	$(BIN)/python tools/book.py --out _build/book

slides: $(STAMP) slides-deps ## lecture slides (reveal.js, offline, stored outputs) of notebooks (NB=path to pick one) in _build/slides
	$(BIN)/python tools/slides.py export --out _build/slides $(NB)

present: $(STAMP) ## present NB=path with RISE (Alt+R) from a copy in _build/present: notebooks/ is never saved
	$(BIN)/python tools/slides.py present $(NB) --ip=$(LAB_IP) $(ROOT_FLAG)

lint: $(STAMP) ## ruff over code and notebooks
	$(BIN)/ruff check src tests benchmarks notebooks solutions tools book conftest.py
	$(BIN)/ruff format --check src tests benchmarks solutions tools book conftest.py

bench: $(STAMP) ## run every benchmark (JSON lines on stdout)
	for b in benchmarks/*.py; do echo "# $$b"; $(BIN)/python $$b || exit 1; done

slurm-check: $(STAMP) ## run slurm/train_ddp.sbatch on a one-host Slurm cluster, requeue it (root)
	slurm/check_local.sh

clean: ## remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache _build

# --- The version matrix: the notebooks on newer torch releases --------------------
# Each version gets its own environment outside the working tree, shared by every clone and
# reused between runs: $(MATRIX_CACHE)/torch-<version>, torch==<version> plus the rest of
# requirements.txt, installed with PIP_CONSTRAINT=/dev/null for that one pip command (a
# machine-wide constraint may cap torch) and checked afterwards; a stamp in it records the
# requirements' hash, so a changed requirements.txt installs again. The project is not installed
# there: the run puts this clone's src/ on PYTHONPATH. What runs: `pytest --nbval-lax` over
# notebooks/ and the unit tests that state facts about torch (tools/matrix.py UNIT_TESTS:
# test_claims, test_source, test_compile_tools; the others test our own plumbing). Results:
# _build/matrix/torch-<version>.xml and .json; `python3 tools/matrix.py report` publishes them
# (docs/compatibility.json and .md, README's "Tested on" line). See tools/matrix.py.
MATRIX_VERSIONS ?= 2.14.1 2.15.0
MATRIX_CACHE ?= $(HOME)/.cache/pytorch-source-reading
MATRIX_OUT ?= _build/matrix
# the newest torch release the package index serves is tested too when not listed above
# (`make test-matrix MATRIX_NEWEST=` tests only the listed versions)
MATRIX_NEWEST ?= --newest
# both cores, whole notebooks per worker, as `make test` (pytest-xdist is in requirements.txt)
MATRIX_PYTEST_ARGS ?= $(PARALLEL)
MATRIX := $(PYTHON) tools/matrix.py test --cache $(MATRIX_CACHE) --out $(MATRIX_OUT) \
	--pytest-args "$(MATRIX_PYTEST_ARGS)"
.PHONY: test-torch test-matrix matrix-report

test-torch: ## asserts of every notebook + torch-fact unit tests on another torch (TORCH=2.15.0)
	@test -n "$(TORCH)" || { echo "usage: make test-torch TORCH=2.15.0"; exit 2; }
	$(MATRIX) $(TORCH)

test-matrix: ## test-torch for each of MATRIX_VERSIONS (2.14.1 2.15.0) and the newest release; fails if any cell fails
	$(MATRIX) $(MATRIX_NEWEST) $(MATRIX_VERSIONS)

matrix-report: $(STAMP) ## publish the last matrix run: docs/compatibility.{json,md}, its Chinese page, README's "Tested on"
	$(PYTHON) tools/matrix.py report --out $(MATRIX_OUT)
	@# the Chinese book's page (docs/zh/compatibility.md) from the same record: tools/zh.py needs
	@# the project's packages, tools/matrix.py only the standard library
	$(BIN)/python tools/zh.py compatibility
