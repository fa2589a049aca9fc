"""The grade of record: every attack scores zero, every reference solution full marks.

One ``python -m attncourse grade`` run (a subprocess, as an instructor runs it) grades a
folder holding every chapter's reference solutions (pasted into the nbgrader source as
``student-edition`` writes it) and, for each attack of ``tests/fixtures/record_attacks.py``
and each chapter it targets, a submission carrying it. The attacks on the checks
themselves (patching them, their environment, their frames, their profiler) come to
nothing because none of that code runs where the grade is decided, and the hand-offs by
any route are seen by the observers of the answer's process
(:mod:`attncourse.course.sandbox.child`). ``tests/course/test_grade_boundary.py`` holds the
fairness suite and the attacks on the grader and the other students.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from attncourse.course.answers import Answer, extract
from attncourse.course.grade_cli import main as grade_main
from tests.fixtures.hand_off_cheats import CHEATS
from tests.fixtures.record_attacks import ALL, ATTACKS
from tests.fixtures.record_attacks import CHAPTERS as GENERIC_CHAPTERS
from tests.grade_helpers import (
    CHAPTERS,
    ROOT,
    coding,
    grade,
    solved,
    submit,
    with_answers,
)


def targets(attack: tuple, chapter: Path) -> list:
    """The exercises of ``chapter`` that ``attack`` is tried on."""
    _, checks, _, _ = attack
    if checks == ALL:
        return list(coding(chapter).values()) if chapter.stem in GENERIC_CHAPTERS else []
    return [ex for ex in coding(chapter).values() if ex.check in checks]


def attacked(chapter: Path, attack: tuple) -> nbformat.NotebookNode:
    """The chapter's solved notebook with ``attack`` in the answer cells it targets; the other
    answer cells are emptied (graded "missing" at once: the references are graded apart)."""
    _, _, answer, other = attack
    nb = nbformat.from_dict(solved(chapter))
    by_id = {f"{ex.label}-answer": ex for ex in targets(attack, chapter)}
    cells = []
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        ex = by_id.get(grade_id)
        if ex is None and grade_id.endswith("-answer") and cell.cell_type == "code":
            cell.source = ""
        if ex is not None:
            if other:
                cells.append(nbformat.v4.new_code_cell(other))
            cell.source = answer.replace("FN", ex.function).replace("CHECK", ex.check)
        cells.append(cell)
    nb.cells = cells
    return nb


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """``{student: {chapter: record}}`` of one grading run over solutions and attacks."""
    root = tmp_path_factory.mktemp("submitted")
    for chapter in CHAPTERS:
        path = root / "solved" / chapter.stem / f"{chapter.stem}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(solved(chapter), path)
        for attack in ATTACKS:
            if targets(attack, chapter):
                path = root / attack[0] / chapter.stem / f"{chapter.stem}.ipynb"
                path.parent.mkdir(parents=True)
                nbformat.write(attacked(chapter, attack), path)
    out = root.parent / "grades.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "attncourse", "grade", str(root), "--json", str(out),
                           "--limit", "60"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    # What an answer prints never reaches the report (print-a-forged-report).
    assert "solved (04_self_attention): 3/3" not in done.stdout.splitlines()
    print(f"\ngrade of record: {len(list(root.rglob('*.ipynb')))} submissions in "
          f"{time.perf_counter() - start:.1f} s")
    graded: dict[str, dict[str, dict]] = {}
    for record in json.loads(out.read_text()):
        graded.setdefault(record["student"], {})[record["chapter"]] = record
    return graded


def test_every_reference_solution_scores_full_marks(records):
    solved_records = records["solved"]
    assert set(solved_records) == {chapter.stem for chapter in CHAPTERS}
    wrong = [(r["chapter"], ex["label"], ex["status"], ex["message"])
             for r in solved_records.values() for ex in r["exercises"] if ex["points"] != ex["max_points"]]
    assert not wrong, wrong
    assert sum(len(r["exercises"]) for r in solved_records.values()) >= 37
    # Checks whose cases take a seed drew fresh ones, with the seed recorded.
    # Every check but chapter 7b's training (its one case is the learner's 300 steps).
    fresh = [ex["label"] for r in solved_records.values() for ex in r["exercises"] if not ex["fresh_cases"]]
    assert fresh == ["ex-build-train"], fresh
    assert len({r["seed"] for r in solved_records.values()}) == 1
    print("\n" + "\n".join(f"{r['chapter']}: {r['seconds']:.1f} s" for r in solved_records.values()))


@pytest.mark.parametrize("attack", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_every_attack_scores_zero(records, attack):
    name = attack[0]
    tried = {chapter.stem: [ex.label for ex in targets(attack, chapter)] for chapter in CHAPTERS}
    tried = {stem: labels for stem, labels in tried.items() if labels}
    assert tried, f"{name} targets no exercise"
    scored = []
    for stem, labels in tried.items():
        outcomes = {ex["label"]: ex for ex in records[name][stem]["exercises"]}
        for label in labels:
            if outcomes[label]["points"]:
                scored.append((stem, label, outcomes[label]["message"]))
    assert not scored, scored


def _answer(chapter: Path, label: str, source: str) -> Answer:
    nb = nbformat.from_dict(solved(chapter))
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == f"{label}-answer":
            cell.source = source
    return next(a for a in extract(nb, chapter) if a.exercise.label == label)


def test_every_hand_off_cheat_of_the_checks_scores_zero(tmp_path):
    # tests/fixtures/hand_off_cheats.py: what the in-notebook checks refuse, refused by the
    # grade of record too, seen in the answer's own process: one grading run, a submission
    # per cheat (the chapter's other answers left empty).
    first = {}
    for chapter in CHAPTERS:
        for ex in coding(chapter).values():
            first.setdefault(ex.check, (chapter, ex))
    root, tried = tmp_path / "submitted", {}
    for check, cheats in CHEATS.items():
        chapter, ex = first[check]
        for number, (what, source) in enumerate(cheats):
            student = f"{check}-{number}"
            blank = {label: "" for label in coding(chapter) if label != ex.label}
            submit(root, student, chapter.stem,
                   with_answers(chapter, {**blank, ex.label: source.replace("FN", ex.function)}))
            tried[student] = (chapter.stem, ex.label, what)
    done, records = grade(root, tmp_path / "record.json", "--limit", "30")
    assert done.returncode == 0, done.stderr[-2000:]
    passed = []
    for student, (stem, label, what) in tried.items():
        outcome = next(ex for ex in records[student][stem]["exercises"] if ex["label"] == label)
        if outcome["points"]:
            passed.append(f"{student}: {what}: {outcome['message']}")
    assert len(tried) >= 80 and not passed, passed


def test_a_time_limit_costs_that_exercise_only():
    from attncourse.course.record import grade_answer

    chapter = ROOT / "notebooks" / "04_self_attention.md"
    endless = _answer(chapter, "ex-sa-softmax", "def my_softmax(x, axis=-1):\n    while True:\n        pass\n")
    start = time.perf_counter()
    outcome = grade_answer(endless, seed=1, limit=1)
    assert outcome.status == "time limit" and outcome.points == 0
    assert time.perf_counter() - start < 30
    fine = next(a for a in extract(solved(chapter), chapter) if a.exercise.label == "ex-sa-causal")
    assert grade_answer(fine, seed=1, limit=30).status == "passed"


def test_the_answer_is_cut_out_without_the_notebooks_other_code():
    chapter = ROOT / "notebooks" / "04_self_attention.md"
    answer = _answer(chapter, "ex-sa-sdpa",
                     "import os\nos.environ.pop('NBGRADER_EXECUTION', None)\nSCALE = 2.0\nunused = 1\n"
                     "def my_attention(q, k, v, mask=None):\n    return my_softmax(q @ k.T / SCALE) @ v\n"
                     "check_scaled_dot_product = print")
    source = answer.source
    assert "def my_softmax" in source and "SCALE = 2.0" in source and "import numpy as np" in source
    assert "environ" not in source and "unused" not in source and "check_scaled_dot_product" not in source


def test_bad_input_is_one_line(tmp_path, capsys):
    assert grade_main([str(tmp_path / "missing.ipynb")]) == 2
    assert grade_main([str(tmp_path)]) == 2
    (tmp_path / "x.ipynb").write_text("{}")
    assert grade_main([str(tmp_path / "x.ipynb"), "--chapter", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("attncourse: error: ") for line in err), err


def test_answers_written_otherwise_still_score():
    # A helper in the answer's cell, an import of its own, an earlier exercise's answer.
    from attncourse.course.record import grade_answer

    chapter = ROOT / "notebooks" / "04_self_attention.md"
    nb = nbformat.from_dict(solved(chapter))
    sources = {
        "ex-sa-softmax": "import numpy\n\ndef _shift(x, axis):\n    return x - x.max(axis=axis, keepdims=True)\n\n"
                         "def my_softmax(x, axis=-1):\n    e = numpy.exp(_shift(x, axis))\n"
                         "    return e / e.sum(axis=axis, keepdims=True)",
        "ex-sa-sdpa": "import math\n\ndef my_attention(q, k, v, mask=None):\n"
                      "    s = q @ k.T / math.sqrt(k.shape[-1])\n"
                      "    allowed = np.ones(s.shape, bool) if mask is None else mask\n"
                      "    w = my_softmax(np.where(allowed, s, -1e300), axis=-1) * allowed\n"
                      "    total = w.sum(-1, keepdims=True)\n"
                      "    w = w / np.where(total > 0, total, 1)\n    return w @ v, w",
    }
    for cell in nb.cells:
        label = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "").removesuffix("-answer")
        if label in sources:
            cell.source = sources[label]
    outcomes = {a.exercise.label: grade_answer(a, seed=7, limit=60) for a in extract(nb, chapter)}
    assert all(o.status == "passed" for o in outcomes.values()), outcomes


@pytest.mark.filterwarnings("ignore:Object of type")  # nbgrader's own add_submission, in SQLAlchemy 2
def test_the_record_goes_into_nbgraders_gradebook(tmp_path):
    # --gradebook: each check's score becomes the record's points (nbgrader's manual score).
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook

    from attncourse.course.gradebook import GradebookError, record_into_gradebook
    from attncourse.course.grading import scripts_on_path

    chapter, database = "06_transformer", tmp_path / "gradebook.db"
    labels = [ex.label for ex in coding(ROOT / "notebooks" / f"{chapter}.md").values()]
    with scripts_on_path(), Gradebook(f"sqlite:///{database}") as gb:
        gb.add_assignment(chapter)
        gb.add_notebook(chapter, chapter)
        for label in labels:
            gb.add_grade_cell(f"{label}-check", chapter, chapter, max_score=1, cell_type="code")
        gb.add_student("alice")
        gb.add_submission(chapter, "alice")
    record = {"chapter": chapter, "student": "alice",
              "exercises": [{"label": label, "points": i % 2} for i, label in enumerate(labels)]}
    assert record_into_gradebook([record], database) == len(labels)
    with scripts_on_path(), Gradebook(f"sqlite:///{database}") as gb:
        scores = [gb.find_grade(f"{label}-check", chapter, chapter, "alice").score for label in labels]
    assert scores == [i % 2 for i in range(len(labels))]
    with pytest.raises(GradebookError, match="run nbgrader autograde first"):
        record_into_gradebook([{**record, "student": "bob"}], database)
