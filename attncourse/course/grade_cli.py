"""``python -m attncourse grade SUBMISSIONS...``: the grade of record of collected submissions.

A SUBMISSION is a notebook or a folder of them; its chapter is ``--chapter``, else the
notebook's or its folder's name. Prints one line per exercise and a total; ``--json OUT``
writes the records, ``--gradebook DB`` the scores (:mod:`attncourse.course.gradebook`).
Errors end with ``attncourse: error: ...`` and exit status 2 (:mod:`attncourse.course.record`).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path

from attncourse.cli.options import EXIT_USAGE
from attncourse.cli.outputs import output_problem, write_output
from attncourse.course.exercises import NOTEBOOKS, chapter_path, chapters_in
from attncourse.course.nbgrader_source import EXERCISE_LIMIT

COMMAND = "grade"


def build_parser() -> argparse.ArgumentParser:
    """The ``grade`` command's parser."""
    parser = argparse.ArgumentParser(
        prog=f"attncourse {COMMAND}",
        description="Grade submitted notebooks outside the student's kernel: each answer is cut out "
                    "by its syntax tree and run in a contained process of its own, which receives the "
                    "hidden cases' inputs and returns its outputs; the checks compare them here.")
    parser.add_argument("submissions", nargs="+", type=Path, metavar="SUBMISSION",
                        help="a submitted .ipynb, or a folder searched for them (nbgrader's submitted/)")
    parser.add_argument("--chapter", metavar="NAME", help="the chapter of every submission, e.g. "
                        "06_transformer (default: from the notebook's name or folder)")
    parser.add_argument("--json", metavar="OUT", help="write the records as JSON to OUT ('-': stdout)")
    parser.add_argument("--limit", type=float, default=EXERCISE_LIMIT, metavar="SECONDS",
                        help=f"time limit of one exercise (default {EXERCISE_LIMIT})")
    parser.add_argument("--seed", type=int, metavar="N",
                        help="seed of the hidden random cases (default: a fresh one, recorded)")
    parser.add_argument("--gradebook", type=Path, metavar="DB",
                        help="also set each check's score in nbgrader's gradebook (gradebook.db, after "
                             "nbgrader autograde) to the grade of record")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, metavar="DIR",
                        help="folder of the chapters' MyST sources (default: the course's notebooks/)")
    parser.add_argument("--overwrite", action="store_true",
                        help="let --json replace an existing file that grade did not write")
    return parser


def _ours(path: Path) -> bool:
    """Whether ``path`` holds records that ``grade --json`` wrote (replaced without --overwrite)."""
    try:
        if path.stat().st_size > 200_000_000:
            return False
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    keys = {"submission", "student", "chapter", "seed", "exercises"}
    return isinstance(records, list) and all(isinstance(r, dict) and keys <= r.keys() for r in records)


def _submissions(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        elif path.is_file():
            found.append(path)
        else:
            raise ValueError(f"{str(path)!r} is neither a notebook nor a folder")
    if not found:
        raise ValueError("no submitted notebook (.ipynb) found")
    return found


def _chapter(path: Path, chapter: str | None, notebooks: Path) -> Path:
    if chapter is not None:
        return chapter_path(chapter, notebooks, "--chapter")
    names = chapters_in(notebooks)
    for guess in (path.stem, path.parent.name):
        if guess in names:
            return names[guess]
    raise ValueError(f"{str(path)!r}: which chapter? Name it with --chapter")


def _print(record: dict) -> None:
    print(f"{record['student']} ({record['chapter']}): {record['score']:g}/{record['max_score']:g} "
          f"in {record['seconds']:.1f} s")
    for ex in record["exercises"]:
        print(f"  {ex['label']:<32} {ex['points']:g}/{ex['max_points']:g}  {ex['status']}: {ex['message']}")
        if ex.get("hint"):
            print(f"  {'':<32}      hint: {ex['hint']}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``grade``; return the exit status (0, or 2 with a one-line error)."""
    try:
        args = build_parser().parse_args(None if argv is None else list(argv))
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else EXIT_USAGE
    try:
        if args.limit <= 0:
            raise ValueError("--limit must be a positive number of seconds")
        jobs = [(path, _chapter(path, args.chapter, args.notebooks)) for path in _submissions(args.submissions)]
        if args.json:  # before any work: never a submission, a chapter or a user's file
            inputs = [path for path, _ in jobs] + sorted({chapter for _, chapter in jobs})
            inputs += [args.gradebook] if args.gradebook is not None else []
            problem = output_problem(Path(args.json), "--json", inputs=inputs, ours=_ours,
                                     overwrite=args.overwrite)
            if problem:
                raise ValueError(problem)
        # Imports every check: only once the input is known to be good.
        from attncourse.course.record import grade_notebook

        seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
        records = []
        for path, chapter in jobs:  # a bad notebook is that submission's zero, with its reason
            record = grade_notebook(path, chapter, seed, args.limit)
            records.append(record)
            if args.json != "-":
                _print(record)
        if args.gradebook is not None:
            from attncourse.course.gradebook import record_into_gradebook

            count = record_into_gradebook(records, args.gradebook)
            print(f"set {count} scores in {args.gradebook}", file=sys.stderr if args.json == "-" else sys.stdout)
        if args.json:  # once every answer's process is gone, in one rename
            write_output(json.dumps(records, indent=1) + "\n", Path(args.json))
    except (ValueError, OSError) as err:
        print(f"attncourse: error: {' '.join(str(err).split())}", file=sys.stderr)
        return EXIT_USAGE
    return 0


__all__ = ["build_parser", "main"]
