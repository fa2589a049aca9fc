"""Execute the book's notebooks in parallel into the build's execution cache.

Usage: ``python book/_ext/execute_chapters.py BOOK_OUTPUT NOTEBOOK.md ...``

Jupyter Book 1 executes the notebooks one after another while it reads them, and the
chapters run torch on one thread each: on CI's 2 cores half the machine sat idle for most
of the build. This runs them first, one per core, with jupyter-cache's own parallel
executor, into the cache the build then reads (``execute_notebooks: cache`` in
``_config.yml``), so the build finds every notebook executed and only renders it:

- notebooks are read with myst-nb's reader, as the build reads them, so the cache keys
  match;
- each runs in its own folder, with the timeout and ``allow_errors`` of ``_config.yml``
  (the timeout replaced by ``ATTNCOURSE_CELL_TIMEOUT`` where set: ``make test``),
  and with the book's variable for static explorers set, as in the build;
- two chapters that need the same trained model do not train it twice: the second
  waits for the first (:func:`attncourse.runtime.run_lock`);
- the longest chapters start first, one notebook at a time per core (the times of
  ``book/chapter_timings.json``): jupyter-cache's own pool hands out the notebooks two at
  a time in file order, which left one core idle for minutes at the end;
- each notebook's kernel gets its share of the cores' threads (one each on CI's 2 cores,
  through ``OMP_NUM_THREADS`` and its BLAS cousins, unless already set): two kernels of
  two torch threads each on 2 cores ran a small Transformer's training steps 5.5 times
  slower than two kernels of one thread each (63 s against 11 s, measured).

A notebook that fails is not cached: the build executes it again and reports the error
where it belongs, on its page (or as a failure with ``-W``). The exit status is 1 then.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path

import yaml
from jupyter_cache import get_cache
from jupyter_cache.executors.base import ExecutorRunResult
from jupyter_cache.executors.basic import (
    ExecutionWorkerLocalMProc,
    JupyterExecutorLocalMproc,
    ProcessData,
)

sys.path.insert(0, str(Path(__file__).parent))
from attncourse_book import (  # noqa: E402  (the extension's own copies)
    BOOK_ENV,
    cell_timeout,
)

ROOT = Path(__file__).resolve().parents[2]
#: myst-nb's plugin for jupyter-cache: the same reader as the book build's.
MYST_READER = {"type": "plugin", "name": "myst_nb_md"}
#: Seconds each chapter took in `make test` (`make timings`); a new chapter counts as long.
TIMINGS = ROOT / "book" / "chapter_timings.json"
NEW_CHAPTER_SECONDS = 300


#: The thread-count variables of torch's OpenMP, MKL and OpenBLAS, which kernels inherit.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def share_threads(processes: int) -> None:
    """Give each of ``processes`` kernels an equal share of the cores (at least one thread).

    Sets the variables of :data:`THREAD_VARIABLES` in this process's environment, which the
    kernels it starts inherit; a variable the user has set already is left as it is.
    """
    threads = max(1, (os.cpu_count() or 1) // processes)
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(threads))


class LongestFirstExecutor(JupyterExecutorLocalMproc):
    """jupyter-cache's parallel executor, scheduling the longest notebook first, one at a time."""

    def run_and_cache(self, *, filter_uris=None, filter_pks=None, timeout=30,
                      allow_errors=False, force=False) -> ExecutorRunResult:
        seconds = json.loads(TIMINGS.read_text())["seconds"] if TIMINGS.exists() else {}
        records = sorted(self.get_records(filter_uris, filter_pks, clear_tracebacks=True),
                         key=lambda r: -seconds.get(Path(r.uri).stem, NEW_CHAPTER_SECONDS))
        work = [ProcessData(r.pk, r.uri, self.cache, timeout, allow_errors) for r in records]
        processes = max(1, min(os.cpu_count() or 1, len(work)))
        share_threads(processes)
        with multiprocessing.Pool(processes) as pool:
            results = list(pool.imap_unordered(ExecutionWorkerLocalMProc(), work, chunksize=1))
        return ExecutorRunResult(
            succeeded=[uri for status, uri in results if status == 0],
            excepted=[uri for status, uri in results if status == 1],
            errored=[uri for status, uri in results if status == 2],
        )


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: execute_chapters.py BOOK_OUTPUT NOTEBOOK.md ...", file=sys.stderr)
        return 2
    output, notebooks = Path(argv[0]), [Path(nb).resolve() for nb in argv[1:]]
    execute = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]
    # Where myst-nb looks: next to the HTML output folder (output/_build/html).
    cache = get_cache(str((output / "_build" / ".jupyter_cache").resolve()))
    for notebook in notebooks:
        cache.add_nb_to_project(str(notebook), read_data=MYST_READER)
    os.environ[BOOK_ENV] = "1"
    executor = LongestFirstExecutor(cache)
    result = executor.run_and_cache(
        filter_uris=[str(nb) for nb in notebooks],
        timeout=cell_timeout(execute["timeout"]),
        allow_errors=execute["allow_errors"],
    )
    for record in cache.list_cache_records():
        seconds = record.data.get("execution_seconds")
        if seconds is not None and record.uri in result.succeeded:
            print(f"executed {Path(record.uri).name} in {seconds:.0f} s")
    failed = result.excepted + result.errored
    for uri in failed:
        print(f"failed: {Path(uri).name} (the book build runs it again and shows the error)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
