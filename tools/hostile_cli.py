"""A hostile run of the command line: many invocations of ``python -m attncourse``, each in a
temporary folder, with forged run files, special files, random options, interrupts and
concurrent runs; every outcome classified.

    python tools/hostile_cli.py --workers 2 --json hostile.json           # the full run (1,000+)
    python tools/hostile_cli.py --limit 60 --workers 1 --json h.json       # a quick look

Outcomes (:func:`classify`), worst first: ``hang`` (past its timeout), ``user file deleted or
replaced`` (a file planted before the run, by digest), ``written outside`` (a new file outside
the folders the invocation may write), ``traceback`` (or a death by a signal), ``messy error``
(exit 1 or 2 but not one ``attncourse: error:`` line), then ``clean error``, ``interrupted``
(130 after a Ctrl-C the case sent) and ``success``. Every case is built in its own folder under
one temporary root; ``HOME`` points into it, so the home folder the tool refuses is a copy.
Cases are interleaved by category, so ``--limit`` still samples every category.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_cases import (  # noqa: E402
    LM_TINY,
    ROOT,
    SEQ_TINY,
    TEXT,
    USER_FILE,
    Case,
    all_cases,
)

__all__ = ["Case", "all_cases", "changed_files", "classify", "new_outside", "snapshot"]

# worst first: a case's outcome is the first that applies
OUTCOMES = ("hang", "user file deleted or replaced", "written outside", "traceback", "messy error",
            "clean error", "interrupted", "success")


# --- classification (imported by tests/project/test_hostile_cli.py: no torch here) ----------------------


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> digest (regular files), ``link:<target>`` or the kind, for everything under ``root``."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                found[rel] = "link:" + os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                try:
                    found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError:
                    found[rel] = "unreadable"
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = "dir"
            else:
                found[rel] = "special"
    return found


def changed_files(before: dict[str, str], after: dict[str, str], planted: list[str]) -> list[str]:
    """The planted files (relative paths) deleted or replaced between two snapshots."""
    return [p for p in planted if p in before and after.get(p) != before[p]]


def new_outside(before: dict[str, str], after: dict[str, str], allowed: list[str]) -> list[str]:
    """Paths new in ``after`` that lie under none of ``allowed`` (relative folders or files)."""
    def inside(path: str) -> bool:
        return any(path == a or path.startswith(a.rstrip("/") + "/") for a in allowed)
    return sorted(p for p in after if p not in before and not inside(p))


def classify(returncode: int | None, stderr: str, *, timed_out: bool = False, changed: list[str] = (),
             outside: list[str] = (), interrupted: bool = False) -> str:
    """The outcome of one invocation (one of :data:`OUTCOMES`)."""
    if timed_out:
        return "hang"
    if changed:
        return "user file deleted or replaced"
    if outside:
        return "written outside"
    if "Traceback (most recent call last)" in stderr or returncode is None or returncode < 0:
        return "traceback"
    lines = [line for line in stderr.splitlines() if line.strip()]
    if returncode == 130 and interrupted and any(line.startswith("attncourse: interrupted") for line in lines):
        return "interrupted"
    if returncode == 0:
        return "success"
    errors = [line for line in lines if line.startswith("attncourse: error: ")]
    others = [line for line in lines if not line.startswith(("attncourse: error: ", "attncourse: note: "))]
    if returncode in (1, 2) and len(errors) == 1 and not others:
        return "clean error"
    return "messy error"


# --- running -----------------------------------------------------------------------------------------


#: Seconds a base run may take before it is recorded as a hang.
SETUP_TIMEOUT_S = 600.0


def _env(case_dir: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HOME": str(case_dir / "home"),
            "PYTHONDONTWRITEBYTECODE": "1"}


def build_bases(base: Path) -> list[dict]:
    """The inputs and the three base runs every case copies from; their invocations are classified too."""
    base.mkdir(parents=True, exist_ok=True)
    (base / "text.txt").write_text(TEXT)
    words = ["one", "two", "three", "four", "five", "six"]
    for name, n, offset in (("train", 48, 0), ("valid", 12, 1), ("test", 12, 2)):
        lines = []
        for i in range(n):
            src = [words[(i * 7 + j * 3 + offset) % 6] for j in range(1 + (i + offset) % 4)]
            lines.append(" ".join(src) + "\t" + " ".join(reversed(src)))
        (base / f"{name}.tsv").write_text("\n".join(lines) + "\n")
    results = []
    for argv in (["train-lm", "--text", "text.txt", "--out", "lm", *LM_TINY],
                 ["train-lm", "--text", "text.txt", "--out", "gated", *LM_TINY, "--attention", "gated"],
                 ["train-lm", "--text", "text.txt", "--out", "delta", *LM_TINY, "--attention", "deltanet",
                  "--positional", "learned"],
                 ["train", "--train", "train.tsv", "--valid", "valid.tsv", "--out", "seq", *SEQ_TINY]):
        # a slow machine's base run that hangs or fails is an outcome like any other: the cases
        # that need its folder say so ("harness error"), the others run
        proc = _start(argv, base)
        code, err, timed_out = _finish(proc, SETUP_TIMEOUT_S, None)
        results.append({"category": "setup", "name": " ".join(argv),
                        "outcome": classify(code, err, timed_out=timed_out),
                        "returncode": code, "stderr": err[-2000:]})
    return results


def _start(argv: list[str], case_dir: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    # SIGINT at its default in the child, whatever this process inherited (a background job ignores it)
    return subprocess.Popen([sys.executable, "-m", "attncourse", *argv], cwd=case_dir,
                            env={**_env(case_dir), **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace",
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _finish(proc: subprocess.Popen, timeout: float, sigint_after: float | None) -> tuple[int | None, str, bool]:
    start = time.time()
    try:
        if sigint_after is not None:
            try:
                proc.wait(timeout=sigint_after)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=max(1.0, timeout - (time.time() - start)))
        return proc.returncode, err, False
    except subprocess.TimeoutExpired:
        return None, "", True
    finally:
        if proc.poll() is None:  # every child this tool started ends with its case
            proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def run_case(case: Case, base: Path, root: Path, index: int) -> list[dict]:
    case_dir = root / f"case{index:05d}"
    case_dir.mkdir()
    for name in ("text.txt", "train.tsv", "valid.tsv", "test.tsv"):
        shutil.copy(base / name, case_dir / name)
    (case_dir / "home").mkdir()
    (case_dir / "user").mkdir()
    (case_dir / USER_FILE).write_text("the user's notes\n")
    results = []
    try:
        for run in case.needs:
            if not (base / run).is_dir():
                raise FileNotFoundError(f"its base run {run!r} did not finish (see the setup rows)")
            shutil.copytree(base / run, case_dir / run, symlinks=True)
        if case.prepare is not None:
            case.prepare(case_dir)
        before = snapshot(case_dir)
        root_before = set(os.listdir("/"))
        procs = [_start(case.argv, case_dir, case.env)] + (
            [_start(case.twin, case_dir, case.env)] if case.twin else [])
        outcomes = [_finish(p, case.timeout, case.sigint_after) for p in procs]
        after = snapshot(case_dir)
        written_root = sorted(set(os.listdir("/")) - root_before)
        planted = [USER_FILE, "text.txt", "train.tsv", "valid.tsv", "test.tsv", *case.planted]
        changed = changed_files(before, after, planted)
        outside = new_outside(before, after, case.allowed) + ["/" + n for n in written_root]
        for argv, (code, err, timed_out) in zip([case.argv, case.twin], outcomes):
            outcome = classify(code, err, timed_out=timed_out, changed=changed, outside=outside,
                               interrupted=case.sigint_after is not None)
            results.append({"category": case.category, "name": case.name, "argv": argv, "outcome": outcome,
                            "returncode": code, "stderr": err[-2000:], "changed": changed, "outside": outside})
    except Exception as err:  # the harness's own failure (a forgery that does not apply): said, not hidden
        results.append({"category": case.category, "name": case.name, "argv": case.argv,
                        "outcome": "harness error", "returncode": None, "stderr": repr(err)})
    finally:
        for dirpath, dirnames, _ in os.walk(case_dir):  # read-only folders: removable again
            for name in dirnames:
                try:
                    os.chmod(Path(dirpath, name), 0o755)
                except OSError:
                    pass
        shutil.rmtree(case_dir, ignore_errors=True)
    return results


def table(results: list[dict]) -> str:
    categories = sorted({r["category"] for r in results})
    outcomes = [o for o in (*OUTCOMES, "harness error") if any(r["outcome"] == o for r in results)]
    counts = Counter((r["category"], r["outcome"]) for r in results)
    width = max(len(c) for c in categories + ["category", "all"]) + 2
    head = "category".ljust(width) + "".join(o[:14].rjust(16) for o in outcomes) + "total".rjust(8)
    lines = [head, "-" * len(head)]
    for category in categories + ["all"]:
        row = [counts[(category, o)] if category != "all" else sum(counts[(c, o)] for c in categories)
               for o in outcomes]
        lines.append(category.ljust(width) + "".join(str(n).rjust(16) for n in row) + str(sum(row)).rjust(8))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1, help="invocations at once (default 1)")
    parser.add_argument("--limit", type=int, default=None, help="run only the first N cases (interleaved)")
    parser.add_argument("--fuzz", type=int, default=800, help="option-fuzzing cases (default 800)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="run only the cases of this category (e.g. 'interrupt')")
    parser.add_argument("--json", type=Path, default=None, help="write every result and the counts here")
    args = parser.parse_args(argv)
    cases = all_cases(args.seed, args.fuzz)
    if args.only is not None:
        cases = [case for case in cases if case.category == args.only]
    if args.limit is not None:
        cases = cases[:args.limit]
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="hostile-cli-") as tmp:
        root = Path(tmp)
        results = build_bases(root / "base")
        with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            for found in pool.map(lambda ic: run_case(ic[1], root / "base", root, ic[0]), enumerate(cases)):
                results += found
                bad = [r for r in found if r["outcome"] not in ("clean error", "success", "interrupted")]
                for r in bad:
                    print(f"  {r['outcome']}: [{r['category']}] {r['name']}: {r['stderr'][-300:]!r}",
                          file=sys.stderr)
    print(table(results))
    print(f"{len(results)} invocations ({len(cases)} cases and 4 setup runs) in {time.time() - started:.0f} s")
    if args.json is not None:
        counts = Counter(r["outcome"] for r in results)
        by_category = {c: dict(Counter(r["outcome"] for r in results if r["category"] == c))
                       for c in sorted({r["category"] for r in results})}
        args.json.write_text(json.dumps({"invocations": len(results), "counts": dict(counts),
                                         "by_category": by_category, "results": results}, indent=1,
                                        default=str))
    worst = {r["outcome"] for r in results} - {"clean error", "success", "interrupted"}
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
