"""``python -m attncourse student-edition OUT/``: the editions of every chapter for a class.

Writes ``OUT/README.md``, the licences, ``student/<chapter>.ipynb`` (no solutions, no
outputs), ``instructor/<chapter>.ipynb`` and an nbgrader course directory
(``nbgrader/source/<chapter>/<chapter>.ipynb``). ``OUT`` must be new or empty unless
``--overwrite``, which replaces only what an earlier run wrote
(:mod:`attncourse.course.owned_folder`). Errors end with ``attncourse: error: ...`` and
exit status 2.
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from attncourse.cli.options import EXIT_USAGE, Parser
from attncourse.cli.outputs import os_reason
from attncourse.cli.parsing import add_fields
from attncourse.course.editions import chapter_editions, write_notebook
from attncourse.course.exercises import NOTEBOOKS, chapter_exercises, read_chapter
from attncourse.course.nbgrader_source import CHECK_POINTS, WRITTEN_POINTS, write_course
from attncourse.course.notice import NOTICE, write_licences
from attncourse.course.owned_folder import check_owned, publish
from attncourse.course.rubrics import rubrics_markdown
from attncourse.course.slides import EXECUTED, executed_notebooks, write_decks
from attncourse.train.config import setting, settings

COMMAND = "student-edition"

README = """# attncourse: editions for a class

Written by `python -m attncourse student-edition` from {source}.

All notebooks are plain Markdown and read right in any Jupyter: exercises are headings,
citations read (Author, year) with a works-cited list at the end, links between chapters
point at the `.ipynb` files beside them.

- `student/`: one notebook per chapter without any solution (code or text) and without
  outputs. Statements, stubs (`...   # your code here`) and check calls stay: the notebook
  runs top to bottom, and each check shows "not passed yet" with a hint until the stub is
  filled in.{markdown} Students need the course's package: `pip install -r
  requirements-student.txt` and `pip install -e .` in a copy of the course.
- `instructor/`: the whole chapters, solutions included, without outputs, with a rubric
  after each written solution; `instructor/rubrics.md`, every rubric; and
  `instructor/slides/<chapter>.slides.html`, a short reveal.js deck per chapter that opens
  offline (keep the `reveal.js/` and `mathjax/` folders beside the decks), with the
  chapter's figures when the book was built first.
- `nbgrader/`: an nbgrader course directory (`nbgrader_config.py`, `source/<chapter>/`), one
  assignment per chapter. Coding exercises: an answer cell and a read-only test cell worth
  {check} point(s); written exercises: a manually graded answer cell worth {written} point(s).

Grading with nbgrader (https://nbgrader.readthedocs.io), from `nbgrader/`, when the
submissions arrive without nbgrader's exchange (the book's *For instructors* page gives the
whole cycle with the exchange, command by command):

    nbgrader generate_assignment 04_self_attention     # writes release/04_self_attention/
    # hand out release/..., put submissions into submitted/<student>/04_self_attention/
    python -m attncourse prepare 04_self_attention      # trains the chapter's models, once
    ls submitted | xargs -P 2 -I{{}} nbgrader autograde 04_self_attention --student {{}}
    # grade the written answers: jupyter lab, menu Nbgrader > Formgrader
    nbgrader generate_feedback 04_self_attention       # feedback/<student>/04_self_attention/
    nbgrader export                                    # grades.csv

The kernel that grades needs the course's package (`pip install -e` of the course, or
PYTHONPATH), and the environment's `bin/` on PATH. Grading never trains: `nbgrader_config.py`
sets `ATTNCOURSE_NO_TRAINING=1` for `nbgrader autograde`, which then loads the models that
`prepare` trained (use the same `ATTNCOURSE_RUNS` for both). Chapters: {chapters} ({n_ex} exercises:
{n_coding} coding, {n_written} written).

Licence: {notice} Every notebook here starts with this notice and every deck's title slide
shows it: keep them in what you hand out. `LICENSE` (MIT, the code) and `LICENSE-CONTENT`
(CC BY-SA 4.0, the text and figures) are in this folder, and in each nbgrader assignment's
source folder, so a release hands them out with the notebook.
"""


#: How a README.md this command wrote begins: --overwrite replaces no other README.md.


@dataclass(frozen=True)
class EditionOptions:
    """``student-edition``'s options: each field is one (:func:`~attncourse.train.config.setting`)."""

    out: Path = setting(None, "folder to write into (new or empty)", check="path", metavar="OUT",
                        positional=True)
    notebooks: Path = setting(NOTEBOOKS, "folder of the chapters' MyST sources (default: the course's "
                              "notebooks/)", check="path", metavar="DIR")
    chapter: list[str] | None = setting(None, "only this chapter, e.g. 04_self_attention (repeat for more)",
                                        check="text", metavar="NAME", repeat=True)
    markdown: bool = setting(False, "also write each student notebook as MyST markdown (.md)", negatable=False)
    executed: Path | None = setting(None, "folder of the executed chapters (<chapter>.ipynb) whose figures the "
                                    "slides show (default: the book build's, " + " or ".join(EXECUTED) + ")",
                                    check="path", metavar="DIR")
    no_nbgrader: bool = setting(False, "leave out the nbgrader folder", negatable=False)
    overwrite: bool = setting(False, "write into OUT even if it holds files (same names are replaced)",
                              negatable=False)


def build_parser() -> argparse.ArgumentParser:
    """The ``student-edition`` command's parser, from :class:`EditionOptions`."""
    parser = Parser(prog=f"attncourse {COMMAND}",
                     description="Write student and instructor editions of every chapter and an "
                                 "nbgrader course directory into OUT.")
    add_fields(parser, settings(EditionOptions))
    return parser


def _chapters(args: argparse.Namespace) -> list[Path]:
    if not args.notebooks.is_dir():
        raise ValueError(f"--notebooks {str(args.notebooks)!r} is not a folder")
    found = sorted(args.notebooks.glob("*.md"))
    if not found:
        raise ValueError(f"--notebooks {str(args.notebooks)!r} holds no chapter (*.md)")
    if not args.chapter:
        return found
    names = {p.stem: p for p in found}
    missing = [name for name in args.chapter if name not in names]
    if missing:
        raise ValueError(f"--chapter {missing[0]!r} is not in {str(args.notebooks)!r} "
                         f"(chapters: {', '.join(names)})")
    return [names[name] for name in args.chapter]


def write_editions(args: argparse.Namespace) -> list[Path]:
    """Write everything the command writes; return the files written.

    ``OUT`` is owned by content (:mod:`attncourse.course.owned_folder`): the editions are
    written into a staging folder beside it, then moved in, replacing only what an earlier
    run wrote; nothing is written through a link, into the home folder or ``/``.
    """
    chapters = _chapters(args)
    out: Path = args.out
    check_owned(out)
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        raise ValueError(f"OUT {str(out)!r} is not empty; pass --overwrite to replace the editions "
                         "in it, or choose another folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a name on the path is a file: said as such by os_reason
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(out)) from None
    staging = Path(tempfile.mkdtemp(prefix=".attncourse-edition-", dir=out.parent))
    try:
        _write_editions(args, chapters, staging)
        written = publish(staging, out, keep=frozenset({"README.md"}))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if out / "README.md" not in written:
        print(f"attncourse: note: kept {out / 'README.md'}, which student-edition did not write "
              "(--overwrite replaces only what an earlier edition wrote)", file=sys.stderr)
    return written


def _write_editions(args: argparse.Namespace, chapters: list[Path], out: Path) -> None:
    """Write every file of the editions into ``out`` (the staging folder)."""
    written: list[Path] = []
    exercises = []
    students = {}
    for path in chapters:
        try:
            student, instructor = chapter_editions(path)
        except UnicodeDecodeError as err:  # name the chapter: the codec's message names no file
            raise ValueError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start:,}); save it as "
                             "UTF-8") from None
        except yaml.YAMLError as err:  # front matter that is not YAML (unclosed, say)
            mark = getattr(err, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            reason = " ".join(str(getattr(err, "problem", None) or err).split())[:200]
            raise ValueError(f"{path}: its front matter is not valid YAML{where}: {reason}") from None
        students[path.stem] = student
        written += write_notebook(student, out / "student" / f"{path.stem}.ipynb", args.markdown)
        written += write_notebook(instructor, out / "instructor" / f"{path.stem}.ipynb")
        exercises += chapter_exercises(path)
    rubrics = out / "instructor" / "rubrics.md"
    rubrics.write_text(rubrics_markdown(exercises), encoding="utf-8")
    written.append(rubrics)
    if args.executed is not None and not args.executed.is_dir():
        raise ValueError(f"--executed {str(args.executed)!r} is not a folder")
    read = {path.stem: read_chapter(path) for path in chapters}
    executed = (executed_notebooks(args.executed, read, here=True) if args.executed is not None
                else executed_notebooks(args.notebooks.resolve().parent, read))
    if len(executed) < len(students):
        print(f"attncourse: note: the slides of {len(students) - len(executed)} chapter(s) have no "
              "figures: no executed notebook found (run `make book` first, or pass --executed)",
              file=sys.stderr)
    written += write_decks(students, out / "instructor" / "slides", executed)
    written += write_licences(out)
    if not args.no_nbgrader:
        written += write_course(chapters, out / "nbgrader")
        for path in chapters:  # nbgrader's release copies an assignment's other files with it
            written += write_licences(out / "nbgrader" / "source" / path.stem)
    coding = sum(ex.kind == "coding" for ex in exercises)
    readme = README.format(
        source=args.notebooks, chapters=", ".join(p.stem for p in chapters), n_ex=len(exercises),
        n_coding=coding, n_written=len(exercises) - coding, check=CHECK_POINTS, written=WRITTEN_POINTS,
        markdown=" With `--markdown`, the same as MyST `.md` files." if args.markdown else "",
        notice=NOTICE)
    (out / "README.md").write_text(readme, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``student-edition``; return the exit status (0, or 2 with a one-line error)."""
    try:
        args = build_parser().parse_args(None if argv is None else list(argv))
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else EXIT_USAGE)
    try:
        written = write_editions(args)
    except OSError as err:  # a sentence naming the path, not "[Errno 20] Not a directory: ..."
        print(f"attncourse: error: {os_reason(err)}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as err:
        print(f"attncourse: error: {' '.join(str(err).split())}", file=sys.stderr)
        return EXIT_USAGE

    print(f"wrote {len(written)} files into {args.out} (see {args.out / 'README.md'})")
    return 0
