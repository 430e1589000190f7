# White-Box TensorFlow. `make book` and `make test` create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
NOTEBOOKS := $(wildcard book/*.ipynb)
PYTEST_NOTEBOOK_FLAGS := --nbval-lax --nbval-current-env --sanitize-with book/_nbval_sanitize.cfg

.PHONY: help venv book test unit notebooks check-template stamp execute clean

help:
	@echo "make book      build the HTML book into _build/html (creates .venv if missing)"
	@echo "make test      unit tests + every notebook under nbval + strict book build"
	@echo "make execute   re-run every notebook in place, storing the outputs nbval sees"
	@echo "make stamp     write the current setup cell into every notebook"

$(INSTALLED): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q -e .
	touch $@

venv: $(INSTALLED)

book: $(INSTALLED)
	$(BIN)/jupyter-book build . -W -n --keep-going

# The book is built first: tests/test_book.py checks the built pages (Colab links, outputs).
# One pytest run: unit tests, the docstring examples of the companion, every notebook.
test: $(INSTALLED) check-template book
	$(BIN)/python -m pytest -n 2 --dist loadfile --doctest-modules $(PYTEST_NOTEBOOK_FLAGS) tests companion book

unit: $(INSTALLED)
	$(BIN)/python -m pytest -n 2 --dist loadfile --doctest-modules tests companion

notebooks: $(INSTALLED)
	$(BIN)/python -m pytest -n 2 --dist loadfile $(PYTEST_NOTEBOOK_FLAGS) book

check-template: $(INSTALLED)
	$(BIN)/python tools/notebook_template.py check

stamp: $(INSTALLED)
	$(BIN)/python tools/notebook_template.py stamp

# PYTEST_CURRENT_TEST makes ipykernel leave TF's C++ log lines out of the stored outputs,
# exactly as under nbval (see book/intro.md, "Refreshing outputs").
execute: $(INSTALLED) stamp
	for nb in $(or $(NB),$(NOTEBOOKS)); do \
	  echo "executing $$nb"; \
	  PYTEST_CURRENT_TEST=1 $(BIN)/jupyter-execute --inplace --timeout=600 $$nb || exit 1; \
	done

clean:
	rm -rf _build .pytest_cache
