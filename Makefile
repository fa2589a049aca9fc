# Two commands for everyone: `make book` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
NBVAL_DIR := _build/nbval
TEST_BOOK := _build/test-book
# Trained models of the chapters. `make test` empties it first, so each test run
# trains every model once (in the strict book build) and nbval reuses those weights.
export ATTNCOURSE_RUNS := $(CURDIR)/_build/runs

.PHONY: all book test unit fresh-runs nbval book-check lab clean

all: book

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m pip install --no-deps -e .
	touch $(STAMP)

## book: execute the notebooks (cached between runs) and build the HTML book.
book: $(STAMP)
	$(BIN)/jupyter-book build . -n --keep-going
	@echo "The book is at: $(CURDIR)/_build/html/index.html"

## test: unit tests, a fresh book build with warnings as errors, and nbval on every notebook.
# The book build comes first and trains the chapters' models: nbval waits only 5 s (fixed in
# nbval 0.11) for a cell's last messages after it ends, which a minutes-long training cell
# sometimes misses ("Timeout of 5 seconds exceeded waiting for output"); with the models
# trained, nbval's cells are short.
test: unit fresh-runs book-check nbval
	@echo "All tests passed."

fresh-runs:
	rm -rf $(ATTNCOURSE_RUNS)

unit: $(STAMP)
	$(BIN)/python -m pytest tests -q

# nbval collects only .ipynb: convert the MyST sources into a scratch folder first,
# so that stale copies elsewhere in the tree are never collected. TQDM_DISABLE=1: no
# progress widgets, whose updates nbval would only read after each cell.
nbval: $(STAMP)
	rm -rf $(NBVAL_DIR) && mkdir -p $(NBVAL_DIR)
	for nb in notebooks/*.md; do \
	  $(BIN)/jupytext --quiet --to ipynb --output $(NBVAL_DIR)/$$(basename $${nb%.md}).ipynb $$nb || exit 1; \
	done
	cd $(NBVAL_DIR) && TQDM_DISABLE=1 ../../$(BIN)/python -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env \
	  --nbval-cell-timeout=900 --rootdir=. -q .

# A fresh build (empty execution cache, all pages re-read) so that a failing
# notebook cannot pass from a stale cache; every warning is an error.
book-check: $(STAMP)
	rm -rf $(TEST_BOOK)
	TQDM_DISABLE=1 $(BIN)/jupyter-book build . --path-output $(TEST_BOOK) -n -W --keep-going --all

## lab: JupyterLab with the MyST notebooks opening as notebooks (jupytext).
lab: $(STAMP)
	mkdir -p $(VENV)/share/jupyter/lab/settings
	printf '%s\n' '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}}}' \
	  > $(VENV)/share/jupyter/lab/settings/overrides.json
	$(BIN)/jupyter lab notebooks/

clean:
	rm -rf _build
