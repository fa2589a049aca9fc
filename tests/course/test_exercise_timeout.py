"""An exercise's own time limit: the ``:timeout:`` option of its ``{exercise}`` directive.

The limit of chapter 7b's training exercise is stated on the exercise, read by the nbgrader source and the
grade of record, and the book (sphinx-exercise under ``-W``) accepts the option.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from pathlib import Path

import nbformat
import pytest

from attncourse.course.answers import Answer, coding_exercises, extract
from attncourse.course.exercises import chapter_exercises, read_chapter, split_notebook
from attncourse.course.nbgrader_source import (
    BEGIN,
    END,
    EXERCISE_LIMIT,
    source_notebook,
)

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))
BUILD_GPT = ROOT / "notebooks" / "07b_build_gpt.md"


def _chapter(timeout_line: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(
        f"```{{exercise}} Train it\n:label: ex-t\n{timeout_line}\n\nWrite `f`.\n```")]
    return nb


def test_only_the_exercises_that_run_the_learners_training_declare_a_limit():
    declared = {ex.label: ex.timeout for path in CHAPTERS for ex in chapter_exercises(path)
                if ex.timeout is not None}
    assert declared == {"ex-build-train": 300}
    # The option is not part of the statement the editions show.
    (train,) = [ex for ex in chapter_exercises(BUILD_GPT) if ex.label == "ex-build-train"]
    assert ":timeout:" not in train.statement and train.statement.startswith("Write `my_train(")


def test_the_nbgrader_source_gives_the_declared_limit_to_that_exercises_cells_only():
    nb = source_notebook(read_chapter(BUILD_GPT), BUILD_GPT.stem)
    limits = {cell.metadata["nbgrader"]["grade_id"]: cell.metadata["attncourse"]["timeout"]
              for cell in nb.cells if cell.cell_type == "code" and "nbgrader" in cell.metadata}
    assert limits.pop("ex-build-train-answer") == 300 and limits.pop("ex-build-train-check") == 300
    assert limits and set(limits.values()) == {EXERCISE_LIMIT}, limits


@pytest.mark.parametrize("value", ["0", "-5", "ten", "1.5", "٣"])
def test_a_timeout_that_is_not_a_positive_whole_number_is_refused_in_one_line(value):
    with pytest.raises(ValueError, match=r"^c: ex-t: :timeout: must be a positive whole number") as err:
        split_notebook(_chapter(f":timeout: {value}"), "c")
    assert "\n" not in str(err.value)
    assert split_notebook(_chapter(":timeout: 90"), "c")[1][0].timeout == 90
    assert split_notebook(_chapter(":class: dropdown"), "c")[1][0].timeout is None


def test_the_book_accepts_the_option_that_sphinx_exercise_alone_rejects():
    pytest.importorskip("sphinx_exercise")
    from myst_parser.parsers.directives import parse_directive_text
    from sphinx_exercise.directive import ExerciseDirective, ExerciseStartDirective

    text = ":label: ex-build-train\n:timeout: 300\n\nWrite it."
    spec = importlib.util.spec_from_file_location("attncourse_book", ROOT / "book" / "_ext" / "attncourse_book.py")
    book = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(book)
    saved = {cls: cls.option_spec for cls in (ExerciseDirective, ExerciseStartDirective)}
    try:
        bare = parse_directive_text(ExerciseDirective, "The training loop", text, validate_options=True)
        if "timeout" not in ExerciseDirective.option_spec:  # sphinx-exercise 1.2: unknown, a -W error
            assert any("timeout" in w.msg for w in bare.warnings)
        book.register_exercise_options()
        for cls in saved:
            done = parse_directive_text(cls, "The training loop", text, validate_options=True)
            assert done.options["timeout"] == 300 and not done.warnings
        wrong = parse_directive_text(ExerciseDirective, "t", ":label: a\n:timeout: -3\n\nx",
                                     validate_options=True)
        assert any("timeout" in w.msg for w in wrong.warnings)
    finally:
        for cls, option_spec in saved.items():
            cls.option_spec = option_spec


def test_the_grade_of_record_holds_an_exercises_own_limit_and_only_that_exercise_loses(tmp_path):
    from attncourse.course.record import grade_answer, grade_notebook

    chapter = ROOT / "notebooks" / "04_self_attention.md"
    nb = source_notebook(read_chapter(chapter), chapter.stem)
    for cell in nb.cells:
        cell.source = "\n".join(line for line in cell.source.split("\n") if line.strip() not in (BEGIN, END))
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "ex-sa-causal-answer":
            cell.source = "def my_causal_mask(n):\n    while True:\n        pass\n"
    (endless,) = [a for a in extract(nb, chapter) if a.exercise.label == "ex-sa-causal"]
    # Its own :timeout: (2 s) outranks a grader's shorter --limit (1 s), never a longer one.
    timed = Answer(dataclasses.replace(endless.exercise, timeout=2), endless.source)
    start = time.perf_counter()
    outcome = grade_answer(timed, seed=1, limit=1)
    assert outcome.status == "time limit" and outcome.message == "stopped after 2 s"
    assert 2 <= time.perf_counter() - start < 30
    # The whole submission: the endless exercise scores 0, every other one is graded.
    path = tmp_path / f"{chapter.stem}.ipynb"
    nbformat.write(nb, path)
    record = grade_notebook(path, chapter, seed=3, limit=5)
    status = {ex["label"]: ex["status"] for ex in record["exercises"]}
    assert status.pop("ex-sa-causal") == "time limit"
    assert set(status.values()) == {"passed"} and record["score"] == record["max_score"] - 1
    assert {ex.label for ex in coding_exercises(chapter)} == {ex["label"] for ex in record["exercises"]}

