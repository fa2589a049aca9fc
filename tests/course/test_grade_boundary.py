"""The grade of record's boundary: fair to honest answers, closed to the others.

Every test here runs ``python -m attncourse grade`` on real ``.ipynb`` submissions, as an
instructor does:

- the fairness suite (``tests/fixtures/honest_answers.py``): 41 honest, correct answers
  written as students write them (classes, dataclasses, ``staticmethod``, a ``global``
  counter, an ``nn.Module``, a lambda, helpers below the function or in an earlier answer
  cell, recursion, einsum, ``__future__`` imports, type hints, debug prints...) score full
  marks, and honest wrong answers score 0 with the check's hint;
- the cheat suite by class (``tests/fixtures/boundary_attacks.py``): every attack scores 0;
- the harm test: submissions that write files (another student's notebook, the course
  package, the record, the gradebook), read the grader's ``/proc/<pid>/fd``, signal or kill the grader,
  fork, start a program or allocate 50 GB, graded *before* two honest students, score 0
  and change nothing: the honest students' grades, every submission on disk, the package,
  the record (also seconds after ``grade`` has exited), and the printed report;
- notebooks that are not notebooks (issue 64's list, a cell whose expression makes the
  parser give up) score 0 with their reason, and the run goes on.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import nbformat
import pytest

from attncourse.course.grade_cli import main as grade_main
from tests.fixtures.boundary_attacks import ATTACKS
from tests.fixtures.honest_answers import HONEST, WRONG
from tests.grade_helpers import (
    ROOT,
    chapter,
    grade,
    solved,
    submit,
    with_answers,
)

SOFTMAX = "ex-sa-softmax"
CH4 = "04_self_attention"


def _digest(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(paths) if p.is_file()}


def _package() -> dict[str, str]:
    return _digest((ROOT / "attncourse").rglob("*.py"))


# ----------------------------------------------------------------------------- fairness

@pytest.fixture(scope="module")
def fair(tmp_path_factory):
    root = tmp_path_factory.mktemp("fair") / "submitted"
    for name, stem, label, source, earlier in HONEST:
        submit(root, name, stem, with_answers(chapter(stem), {label: source, **earlier}))
    for name, stem, label, source, _ in WRONG:
        submit(root, name, stem, with_answers(chapter(stem), {label: source}))
    start = time.perf_counter()
    done, records = grade(root, root.parent / "fair.json")
    assert done.returncode == 0, done.stderr
    print(f"\nfairness suite: {len(HONEST) + len(WRONG)} submissions in {time.perf_counter() - start:.1f} s")
    return records


def test_the_fairness_suite_has_forty_honest_answers():
    assert len(HONEST) >= 40 and len({name for name, *_ in HONEST}) == len(HONEST)


@pytest.mark.parametrize("name, stem, label", [(h[0], h[1], h[2]) for h in HONEST], ids=[h[0] for h in HONEST])
def test_an_honest_answer_scores_full_marks(fair, name, stem, label):
    outcome = next(ex for ex in fair[name][stem]["exercises"] if ex["label"] == label)
    assert outcome["points"] == outcome["max_points"], outcome


@pytest.mark.parametrize("name, stem, label, words", [(w[0], w[1], w[2], w[4]) for w in WRONG],
                         ids=[w[0] for w in WRONG])
def test_a_wrong_honest_answer_scores_zero_with_the_checks_hint(fair, name, stem, label, words):
    outcome = next(ex for ex in fair[name][stem]["exercises"] if ex["label"] == label)
    assert outcome["points"] == 0 and outcome["status"] == "failed", outcome
    assert outcome["hint"] and words in outcome["hint"], outcome


# ----------------------------------------------------------------------------- the cheat suite and harm

@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """One grading run: every attack (students ``a-...``, graded first), then two honest students
    (``zz-alice``, ``zz-bob``, the victims); digests of everything around before and after."""
    base = tmp_path_factory.mktemp("attacked")
    root, record = base / "submitted", base / "record.json"
    victims = [submit(root, student, CH4, solved(chapter(CH4))) for student in ("zz-alice", "zz-bob")]
    gradebook = base / "gradebook.db"  # a stand-in: the grades an instructor keeps beside the record
    gradebook.write_bytes(b"SQLite format 3\x00 the instructor's grades")
    names = {}
    for kind, attacks in ATTACKS.items():
        for name, source in attacks:
            filled = (source.replace("{ROOT}", str(ROOT)).replace("{RECORD}", str(record))
                      .replace("{GRADEBOOK}", str(gradebook))
                      .replace("{VICTIM}", str(victims[0]))
                      .replace("{PACKAGE_FILE}", str(ROOT / "attncourse" / "checks" / "core.py")))
            submit(root, f"a-{name}", CH4, with_answers(chapter(CH4), {SOFTMAX: filled}))
            names[name] = kind
    before = _digest([*root.rglob("*.ipynb"), gradebook]), _package()
    start = time.perf_counter()
    done, records = grade(root, record, "--limit", "10")
    seconds = time.perf_counter() - start
    written = record.read_text() if record.exists() else None
    time.sleep(7)  # what a process left behind would do 5 s later
    after = _digest([*root.rglob("*.ipynb"), gradebook]), _package()
    print(f"\ncheat suite and harm: {len(names) + 2} submissions in {seconds:.1f} s")
    return {"done": done, "records": records, "names": names, "before": before, "after": after,
            "written": written, "later": record.read_text() if record.exists() else None}


def test_the_grader_finishes_and_grades_everyone(attacked):
    assert attacked["done"].returncode == 0, attacked["done"].stderr[-2000:]
    assert set(attacked["records"]) == {f"a-{n}" for n in attacked["names"]} | {"zz-alice", "zz-bob"}


@pytest.mark.parametrize("name", [n for attacks in ATTACKS.values() for n, _ in attacks])
def test_every_attack_scores_zero(attacked, name):
    from attncourse.course.sandbox.contain import _pyseccomp

    if name == "thread" and _pyseccomp() is None:
        pytest.skip("without libseccomp a thread escapes the torch function mode (the guide says so)")
    outcome = next(ex for ex in attacked["records"][f"a-{name}"][CH4]["exercises"] if ex["label"] == SOFTMAX)
    assert outcome["points"] == 0, (attacked["names"][name], outcome)


def test_the_honest_students_keep_their_grades(attacked):
    for student in ("zz-alice", "zz-bob"):
        record = attacked["records"][student][CH4]
        assert record["score"] == record["max_score"] == 3, record


def test_nothing_on_disk_changed(attacked):
    submissions_before, package_before = attacked["before"]
    submissions_after, package_after = attacked["after"]
    assert submissions_after == submissions_before
    assert package_after == package_before
    assert attacked["written"] is not None and attacked["later"] == attacked["written"]
    assert json.loads(attacked["written"])


def test_the_report_is_the_graders_own(attacked):
    lines = attacked["done"].stdout.splitlines()
    assert "FORGED" not in attacked["done"].stdout + attacked["done"].stderr
    graded = [line for line in lines if line and not line.startswith(" ")]
    assert len(graded) == len(attacked["records"])  # one line per submission, no more


def test_every_containment_layer_ran(attacked):
    layers = set(attacked["records"]["zz-alice"][CH4]["containment"])
    assert {"rlimits", "no_new_privs", "not_dumpable", "parent_death"} <= layers
    if sys.platform.startswith("linux"):
        from attncourse.course.sandbox.contain import landlock_abi

        if landlock_abi():
            assert any(layer.startswith("landlock") for layer in layers)


# ----------------------------------------------------------------------------- notebooks that are not

#: (name, file content): JSON that is not a notebook, and cells that make the parser give up.
_CELL = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
MALFORMED = [
    ("empty-object", "{}"), ("list", "[]"), ("null", "null"), ("empty-file", ""), ("not-utf8", b"\xff\xfe{"),
    ("cells-number", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": 5})),
    ("cells-text", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": "abc"})),
    ("cell-empty", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{}]})),
    ("source-int", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                               "cells": [{**_CELL, "source": 5}]})),
    ("source-ints", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                "cells": [{**_CELL, "source": [1, 2]}]})),
    ("no-cell-type", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"source": "x"}]})),
    ("cell-type-3", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                "cells": [{"cell_type": 3, "source": "x"}]})),
    ("nbformat-3", json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}})),
    ("metadata-list", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": [], "cells": []})),
    ("nested-brackets", "[" * 100_000 + "]" * 100_000),
    ("unary-minuses", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                  "cells": [{**_CELL, "source": "def my_softmax(x):\n    return " + "-" * 1_000_000
                                             + "x", "metadata": {"nbgrader": {"grade_id": "ex-sa-softmax-answer"}}}]})),
]


def _long_expression_notebook() -> nbformat.NotebookNode:
    """The solved chapter with one extra code cell holding a 3,000-term expression (generated
    code can look like this): ``ast.parse`` raises RecursionError on it."""
    nb = nbformat.from_dict(solved(chapter(CH4)))
    nb.cells.append(nbformat.v4.new_code_cell("y = " + "+".join(f"({i})" for i in range(3000))))
    nb.cells.append(nbformat.v4.new_code_cell("z = " + "(" * 3000 + "1" + ")" * 3000))
    return nb


def test_a_notebook_that_is_not_one_scores_zero_and_the_run_goes_on(tmp_path):
    root = tmp_path / "submitted"
    for name, content in MALFORMED:
        path = root / f"a-{name}" / CH4 / f"{CH4}.ipynb"
        path.parent.mkdir(parents=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    submit(root, "b-long-expression", CH4, _long_expression_notebook())
    submit(root, "zz-honest", CH4, solved(chapter(CH4)))
    done, records = grade(root, tmp_path / "record.json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    for name, _ in MALFORMED:
        record = records[f"a-{name}"][CH4]
        assert record["score"] == 0 and all(ex["status"] in ("missing", "failed") for ex in record["exercises"]), record
        assert all(ex["message"] for ex in record["exercises"])
    # The long expression is in a cell of its own: the answers are graded as usual.
    assert records["b-long-expression"][CH4]["score"] == 3, records["b-long-expression"]
    assert records["zz-honest"][CH4]["score"] == 3


# ----------------------------------------------------------------------------- --json: the output rules

def test_grade_json_never_replaces_what_it_did_not_write(tmp_path, capsys):
    submission = submit(tmp_path / "submitted", "alice", CH4, solved(chapter(CH4)))
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    link = tmp_path / "link.json"
    link.symlink_to(notes)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for out in (notes, link, submission, chapter(CH4), fifo, tmp_path):
        assert grade_main([str(submission), "--json", str(out)]) == 2, out
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 6 and all(line.startswith("attncourse: error: --json ") for line in err), err
    assert notes.read_text() == "mine" and link.is_symlink()
    assert grade_main([str(submission), "--json", str(notes), "--overwrite"]) == 0
    assert json.loads(notes.read_text())[0]["student"] == "alice"
    assert grade_main([str(submission), "--json", str(notes)]) == 0  # its own record: replaced


def test_the_guide_counts_the_suites_as_they_are():
    guide = " ".join((ROOT / "book" / "instructors.md").read_text().split())
    attacks = sum(len(found) for found in ATTACKS.values())
    assert f"{len(HONEST)} honest answers" in guide
    assert f"{attacks} attacks in {len(ATTACKS)} classes" in guide
