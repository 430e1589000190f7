# White-Box TensorFlow. `make book` and `make test` create .venv on first use;
# `make test-colab` creates .venv-colab (the versions Colab ships, requirements-colab.txt);
# `make test-backends` creates .venv-backends (Keras on JAX and PyTorch, no TensorFlow).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
NOTEBOOKS := $(wildcard book/*.ipynb)
PYTEST_NOTEBOOK_FLAGS := --nbval-lax --nbval-current-env --nbval-sanitize-with book/_nbval_sanitize.cfg
# tests/ has four kinds, a folder each: unit/ (the companion, module by module), portable/ (the
# companion's portable pieces, on whichever Keras backend runs: TensorFlow here, JAX and PyTorch
# in `make test-backends`), suites/ (every module at once: bad inputs, conformance, GPU paths,
# layering, docstrings) and book/ (sources/: notebooks, intro, tools; html/: the built pages,
# after `book`; pdf/: the PDF, `make test-pdf`).
UNIT_TESTS := tests/unit tests/portable tests/suites tests/book/sources
PORTABLE_TESTS := tests/portable
SITE_TESTS := tests/book/html

COLAB_STACK := requirements-colab.txt
COLAB_VENV := .venv-colab
COLAB_BIN := $(COLAB_VENV)/bin
COLAB_INSTALLED := $(COLAB_VENV)/.installed
# Test tools only; the constraint keeps them from moving Colab's stack.
COLAB_TOOLS := pytest pytest-xdist nbval nbclient ipykernel nbformat pyyaml
COLAB_PYTHON ?= $(shell tools/find_python.sh $(shell sed -n 's/^# python: *//p' $(COLAB_STACK)))

BACKENDS_STACK := requirements-backends.txt
BACKENDS_VENV := .venv-backends
BACKENDS_BIN := $(BACKENDS_VENV)/bin
BACKENDS_INSTALLED := $(BACKENDS_VENV)/.installed

# TensorFlow logs a few C++ lines before absl's logging is set up (dated "0000 00:00"), which
# TF_CPP_MIN_LOG_LEVEL does not reach: "All log messages before absl::InitializeLog()", oneDNN, no
# CUDA driver, and on Colab's stack "Unable to register cuDNN factory". $(call quiet_tf,command)
# runs a command with those lines taken out of its stderr, keeping its exit status (pipefail).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
TF_EARLY_LOG := /^WARNING: All log messages before absl::InitializeLog|^[IWE]0000 00:00:/d
quiet_tf = { $(1) 2>&1 1>&3 | sed -E '$(TF_EARLY_LOG)' >&2; } 3>&1

# `make check NB=book/<chapter>.ipynb`: the tests of every companion module in the chapter's row of
# book/intro.md, their doctests, the chapter's exercise checks, and those modules' cases of the
# bad-input, conformance and GPU-path suites (tools/chapter_tests.py says which).
CHAPTER_TESTS = $(if $(NB),$(shell python3 tools/chapter_tests.py $(NB)))

.PHONY: help venv book pdf pdf-tools test-pdf lint chromium test unit notebooks notebooks-gpu soak soak-colab check test-colab test-backends bench kernels check-template stamp execute clean

help:
	@echo "make book        build the HTML book into _build/html (creates .venv if missing)"
	@echo "make pdf         the whole book as one PDF: _build/html/white-box-tf.pdf (2.5-4 min)"
	@echo "make test-pdf    make pdf, then check the PDF (tests/book/pdf/)"
	@echo "make test        unit tests + docstring examples + every notebook under nbval + strict book build"
	@echo "make test-colab  the same tests and notebooks on the versions Colab ships ($(COLAB_STACK))"
	@echo "make test-backends  the portable tests under JAX and PyTorch, TensorFlow not installed"
	@echo "make notebooks-gpu  notebooks on Colab's stack under the GPU stand-in (NB=... for one)"
	@echo "make soak        hunt flaky cells: every notebook 3 times (3 hash seeds; TF thread pools of 1, then 4, beside a busy CPU)"
	@echo "make soak-colab  the same on Colab's stack under the GPU stand-in"
	@echo "make lint        ruff: code style and line length (88 in notebooks, 100 elsewhere)"
	@echo "make unit        unit tests and docstring examples only"
	@echo "make notebooks   every notebook under nbval only"
	@echo "make check NB=book/07_custom_training_loops.ipynb"
	@echo "                 one chapter: lint, its notebook, its module's tests (not the slow ones), doctests"
	@echo "make bench       the headline benchmarks: a table, and _build/bench.json"
	@echo "make kernels     compile chapter 13's C++ op into the per-user cache (needs g++)"
	@echo "make execute     re-run every notebook in place, storing the outputs nbval sees (NB=... for one)"
	@echo "make stamp       write the current setup cell and the reading times into every notebook"

$(INSTALLED): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q -e .
	touch $@

venv: $(INSTALLED)

# The API page imports the companion (and TensorFlow): keep TF's C++ start-up lines out of the log.
book: $(INSTALLED)
	$(call quiet_tf,TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/jupyter-book build . -W -n --keep-going)

# The PDF edition, next to the HTML book (book/intro.md links to it): the book built as one page
# (singlehtml, in its own folder) and printed by headless Chromium with book/_static/print.css
# (tools/print_pdf.py). Jupyter Book's own pdfhtml builder downloads a Chromium, which these
# machines cannot, and its LaTeX route loses the figures of notebooks in a folder (MyST-NB#375).
PDF := _build/html/white-box-tf.pdf
# The PDF takes the time the build started: a page edited during the build makes it stale.
pdf: $(INSTALLED) pdf-tools
	mkdir -p _build/pdf && touch _build/pdf/started
	$(call quiet_tf,TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/jupyter-book build . --builder singlehtml \
	  --path-output _build/pdf -W -n --keep-going)
	$(BIN)/python tools/print_pdf.py _build/pdf/_build/singlehtml $(PDF)
	touch -r _build/pdf/started $(PDF)

# The PDF's tools, Debian's packages: Chromium prints, qpdf packs, poppler-utils reads it back
# (the test), MathJax 2 sets the formulas offline, WenQuanYi Zen Hei has the CJK titles.
PDF_PACKAGES := chromium qpdf poppler-utils libjs-mathjax fonts-wqy-zenhei
pdf-tools:
	@{ command -v chromium && command -v qpdf && command -v pdftotext \
	  && test -f /usr/share/javascript/mathjax/MathJax.js && fc-list :lang=zh | grep -q .; } >/dev/null || { \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $(PDF_PACKAGES); }

# tests/book/pdf/ checks the PDF: page count, every figure, every chapter title, nothing cut at
# the right edge.
test-pdf: pdf
	$(BIN)/python -m pytest tests/book/pdf

# pyproject.toml configures ruff for the package and tests; book/ruff.toml narrows the notebooks.
lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# tests/book/html/test_browser.py opens every built page in headless Chromium (Debian's package).
chromium:
	@command -v chromium >/dev/null || { \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }

# The book is built first: tests/book/html/ checks the built pages (Colab links, outputs, how they
# look in a browser). Two pytest runs: the unit tests (the slow ones too), the suites, the book's
# sources and pages and the docstring examples of the companion, test by test as workers free up
# (worksteal); then every notebook, each whole on one worker (loadfile: its cells share a kernel).
test: $(INSTALLED) lint check-template kernels book chromium
	$(BIN)/python -m pytest -n 2 --dist worksteal --doctest-modules $(UNIT_TESTS) $(SITE_TESTS) companion
	$(BIN)/python -m pytest -n 2 --dist loadfile $(PYTEST_NOTEBOOK_FLAGS) book

unit: $(INSTALLED) kernels
	$(BIN)/python -m pytest -n 2 --dist worksteal --doctest-modules $(UNIT_TESTS) companion

notebooks: $(INSTALLED) kernels
	$(BIN)/python -m pytest -n 2 --dist loadfile $(PYTEST_NOTEBOOK_FLAGS) book

# The loop for working on one chapter: 1.0 min for chapter 7 (README.md has the times).
check: $(INSTALLED) kernels
	@test -f "$(NB)" || { echo "usage: make check NB=book/07_custom_training_loops.ipynb" >&2; exit 2; }
	$(BIN)/ruff check $(NB) $(filter-out --%,$(CHAPTER_TESTS))
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow" --doctest-modules \
	  $(PYTEST_NOTEBOOK_FLAGS) $(NB) $(CHAPTER_TESTS)

# Colab's stack first, then the companion exactly as the notebooks' setup cell installs it there
# (a plain, non-editable `pip install` that must leave Colab's packages alone: check_stack.py).
$(COLAB_INSTALLED): $(COLAB_STACK) pyproject.toml
	test -x $(COLAB_BIN)/python || $(COLAB_PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_BIN)/python -m pip install -q --upgrade pip
	$(COLAB_BIN)/python -m pip install -q -r $(COLAB_STACK)
	$(COLAB_BIN)/python -m pip install -q -c $(COLAB_STACK) $(COLAB_TOOLS)
	$(COLAB_BIN)/python -m pip install -q .
	$(COLAB_BIN)/python tools/check_stack.py $(COLAB_STACK)
	touch $@

# Readers run the notebooks in Colab on a GPU: on Colab's stack every notebook runs under the GPU
# stand-in (companion/devices.py: setup() makes Keras and TensorFlow see a GPU, and turns off
# the CPU-only fusions), so that Keras's GPU choices are tested without a GPU. Chapter 14's
# children start it too (pin_runtime): its TensorFlow child saves a .keras file with
# jit_compile=True, its JAX child lists one GPU. tests/portable/test_gpu_runtime.py runs the
# JAX and PyTorch children with their device lists patched to one GPU.
STAND_IN := WHITE_BOX_TF_GPU_STAND_IN
# The installed companion is refreshed from this tree on every run (same version number, so
# --force-reinstall; --no-deps, its dependencies were resolved above). `pytest` (the script, not
# `python -m pytest`) with importlib imports keeps this tree off sys.path, and `--pyargs companion`
# takes the docstring examples from the installed package: tests, doctests and notebooks (whose
# kernels start in book/) all use the installed package, as in Colab.
test-colab: $(COLAB_INSTALLED)
	$(COLAB_BIN)/python -m pip install -q --no-deps --force-reinstall .
	$(COLAB_BIN)/python tools/check_stack.py $(COLAB_STACK)
	cd book && ../$(COLAB_BIN)/python -c "import companion; assert 'site-packages' in companion.__file__, companion.__file__"
	cd book && $(call quiet_tf,TF_CPP_MIN_LOG_LEVEL=3 ../$(COLAB_BIN)/python -m companion.kernels)
	$(COLAB_BIN)/pytest -n 2 --dist worksteal --import-mode=importlib --doctest-modules $(UNIT_TESTS) --pyargs companion
	$(STAND_IN)=1 $(COLAB_BIN)/pytest -n 2 --dist loadfile --import-mode=importlib $(PYTEST_NOTEBOOK_FLAGS) book

# Keras on JAX and on PyTorch, TensorFlow not installed (a JAX or PyTorch user's `pip install
# keras jax`): tests/portable/ (with chapter 14's table, tests/portable/test_backends.py) once per
# backend, in its own process (Keras fixes its backend at import). PyTorch gets one thread per
# process: two test processes share 2 cores, and its default pool takes a thread per core.
$(BACKENDS_INSTALLED): $(BACKENDS_STACK) requirements.txt pyproject.toml
	test -x $(BACKENDS_BIN)/python || $(PYTHON) -m venv $(BACKENDS_VENV)
	$(BACKENDS_BIN)/python -m pip install -q --upgrade pip
	$(BACKENDS_BIN)/python -m pip install -q -r $(BACKENDS_STACK)
	$(BACKENDS_BIN)/python -m pip install -q --no-deps -e .
	$(BACKENDS_BIN)/python -c "import importlib.util as u; assert not u.find_spec('tensorflow'), 'TensorFlow is installed'"
	touch $@

test-backends: $(BACKENDS_INSTALLED)
	for backend in jax torch; do \
	  echo "KERAS_BACKEND=$$backend"; \
	  KERAS_BACKEND=$$backend OMP_NUM_THREADS=1 $(BACKENDS_BIN)/python -m pytest -n 2 \
	    --dist worksteal $(PORTABLE_TESTS) || exit 1; \
	done

# `make notebooks-gpu`: every notebook (or NB=...) on Colab's stack under the GPU stand-in.
notebooks-gpu: $(COLAB_INSTALLED)
	$(COLAB_BIN)/python -m pip install -q --no-deps --force-reinstall .
	$(STAND_IN)=1 $(COLAB_BIN)/pytest -n 2 --dist loadfile --import-mode=importlib $(PYTEST_NOTEBOOK_FLAGS) $(or $(NB),book)

# Flaky cells show up under load, other hash seeds and other thread counts, as CI meets them:
# `make soak` runs every notebook three times, two at a time, with PYTHONHASHSEED 1, 2, 3; the
# second with TensorFlow's thread pools at 1 thread, the third at 4, each beside a CPU-bound
# process (tools/soak.sh; reports in _build/soak/). 4-8 min a run on 2 cores, about 20 min a stack.
soak: $(INSTALLED) kernels
	tools/soak.sh $(BIN)/pytest

soak-colab: $(COLAB_INSTALLED)
	$(COLAB_BIN)/python -m pip install -q --no-deps --force-reinstall .
	$(STAND_IN)=1 tools/soak.sh $(COLAB_BIN)/pytest --import-mode=importlib

# Chapter 13's compiled op (companion.kernels), built ahead of time once per TensorFlow version into
# the per-user cache ($$WHITE_BOX_TF_CACHE, default ~/.cache/white-box-tf/kernels) that the tests
# and notebooks load it from. Without g++ it stops with a message that says so.
kernels: $(INSTALLED)
	$(call quiet_tf,TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m companion.kernels)

# Speed ratios measured side by side in one run (never in the timed unit tests).
bench: $(INSTALLED) kernels
	$(call quiet_tf,TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m companion.bench)

check-template: $(INSTALLED)
	$(BIN)/python tools/notebook_template.py check

stamp: $(INSTALLED)
	$(BIN)/python tools/notebook_template.py stamp
	$(BIN)/python tools/reading_time.py

# PYTEST_CURRENT_TEST makes ipykernel leave TF's C++ log lines out of the stored outputs,
# exactly as under nbval (README.md, "Refresh outputs and add a chapter").
execute: $(INSTALLED)
	$(BIN)/python tools/notebook_template.py stamp $(NB)
	for nb in $(or $(NB),$(NOTEBOOKS)); do \
	  echo "executing $$nb"; \
	  PYTEST_CURRENT_TEST=1 $(BIN)/jupyter-execute --inplace --timeout=600 $$nb || exit 1; \
	  $(BIN)/python tools/strip_timestamps.py $$nb; \
	done

clean:
	rm -rf _build .pytest_cache build
