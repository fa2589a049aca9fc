"""Student editions: no solution left, stubs and checks kept, solutions put back pass every check.

Runs on every chapter in notebooks/ (new chapters included). That the student notebooks
run top to bottom is checked by `make nbval`, which runs them (see the Makefile).
"""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

import nbformat
import pytest

import attncourse.chapters
import attncourse.checks
from attncourse.course.cli import main
from attncourse.course.editions import (
    ANSWER_CELL,
    instructor_notebook,
    student_notebook,
)
from attncourse.course.exercises import read_chapter, split_notebook
from attncourse.course.nbgrader_source import BEGIN, END, answer_source, source_notebook
from attncourse.course.plain import LEFTOVERS, Rewriter, plain_cells, read_bibliography

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CHAPTERS = sorted(NOTEBOOKS.glob("*.md"))
IDS = [p.stem for p in CHAPTERS]


def _text(nb) -> str:
    return "\n".join(cell.source for cell in nb.cells)


def _lines(text: str) -> set[str]:
    return {line.strip() for line in text.split("\n") if line.strip()}


@pytest.fixture(scope="module", params=CHAPTERS, ids=IDS)
def chapter(request):
    nb = read_chapter(request.param)
    parts, exercises = split_notebook(nb, request.param.stem)
    return request.param, nb, parts, exercises


def test_every_exercise_is_labelled_stated_and_coding_ones_are_checked(chapter):
    path, _, _, exercises = chapter
    assert exercises, f"{path.stem} has no exercise"
    for ex in exercises:
        assert re.fullmatch(r"ex-[a-z0-9-]+", ex.label), ex.label
        assert len(ex.statement) > 60, f"{ex.label}: the statement says too little"
        assert ex.solution_text or ex.solution_code, f"{ex.label} has no solution"
        if ex.kind == "coding":
            homes = [attncourse.checks, *attncourse.chapters.modules("checks", path.stem)]
            assert ex.check and any(hasattr(m, ex.check) for m in homes), f"{ex.label}: no check"
            assert ex.check in ex.statement, f"{ex.label}: the statement does not name its check"
            assert ex.function and ex.solution_code, ex.label


def test_no_line_of_a_solution_is_in_the_student_notebook(chapter):
    """No coding solution, code or text; a written exercise's reference answer only folded
    away after the learner's answer cell."""
    path, nb, parts, exercises = chapter
    solutions = _lines("\n".join(p.source for p in parts if p.solution and p.role != "block"))
    # Lines that the chapter also has outside its solutions (a stub's `def`, `result`) may stay.
    elsewhere = _lines("\n".join(p.source for p in parts if not p.solution))
    student_nb = student_notebook(nb, path.stem)
    student = _lines(_text(student_nb))
    leaked = (solutions - elsewhere) & student
    assert not leaked, f"{path.stem}: solution lines in the student edition: {sorted(leaked)[:3]}"
    for ex in exercises:  # the solution text and code of each exercise, collected from the source
        if ex.kind == "written":
            continue
        for line in _lines("\n".join(ex.solution_code + ex.solution_text)) - elsewhere:
            assert line not in student, (ex.label, line)
    unfolded = _lines("\n".join(c.source for c in student_nb.cells
                                if not c.source.startswith("<details>")))
    for ex in exercises:
        if ex.kind == "written":
            for line in _lines("\n".join(ex.solution_text)) - elsewhere:
                assert line not in unfolded, (ex.label, "shown unfolded", line)


def _questions(ex) -> bool:
    """Whether an exercise asks a question to answer in words."""
    return ex.kind == "written" or "?" in ex.statement


def test_every_question_has_an_answer_cell_and_a_folded_check_in_the_student_edition(chapter):
    """Issue 64: a learner alone can answer every question in the notebook and then learn
    whether the answer was right; a graded (nbgrader) copy hands out none of the checks."""
    path, nb, parts, exercises = chapter
    cells = student_notebook(nb, path.stem).cells
    headings = [i for i, c in enumerate(cells) if c.cell_type == "markdown"
                for _ in re.finditer(r"^### Exercise \d+:", c.source, re.M)]
    assert len(headings) == len(exercises), path.stem
    bounds = [*headings[1:], len(cells)]
    for ex, start, end in zip(exercises, headings, bounds):
        span = cells[start:end]
        pairs = [(a, b) for a, b in zip(span, span[1:])
                 if a.source == ANSWER_CELL and b.source.startswith("<details>")]
        if _questions(ex):
            assert pairs, f"{path.stem}: {ex.label} asks a question and has no answer cell"
            assert all(len(b.source) > 80 for _, b in pairs), ex.label
        else:
            assert not pairs, f"{ex.label}: an answer cell with no question"
    checks = [p.source for p in parts if p.role == "self-check"]
    graded = _text(source_notebook(nb, path.stem))
    for text in checks:
        assert text.split("\n")[0] not in graded, (path.stem, "self-check in a graded copy")


def test_student_notebook_keeps_statements_stubs_and_checks(chapter):
    path, nb, _, exercises = chapter
    student = student_notebook(nb, path.stem)
    text = _text(student)
    assert not any("solution" in c.get("metadata", {}).get("tags", []) for c in student.cells)
    assert not re.search(r"\{solution(-start|-end)?\}", text)
    rewriter = Rewriter(read_bibliography(), {p.stem for p in CHAPTERS})
    for ex in exercises:
        # the label is the instructor's name for the exercise: not shown here
        assert f"({ex.label})" not in text and rewriter.markdown(ex.statement) in text
        if ex.kind == "coding":
            stub = nb.cells[ex.stub_cell].source
            assert stub in text and f"{ex.check}({ex.function})" in stub
    assert all(c.get("outputs", []) == [] for c in student.cells)
    assert "jupytext" not in student.metadata and student.metadata.kernelspec.name == "python3"
    nbformat.validate(student)
    full = instructor_notebook(nb)
    assert all(f"({ex.label})" in _text(full) for ex in exercises)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert [c.source for c in full.cells if c.cell_type == "code"] == code


def test_editions_are_plain_markdown_in_nbconverts_plain_html(chapter):
    # What classic Jupyter, a JupyterHub without jupyterlab-myst, and nbgrader's feedback
    # show: nbconvert's HTML exporter renders Markdown only.
    from nbconvert import HTMLExporter

    path, nb, _, exercises = chapter
    student, instructor = student_notebook(nb, path.stem), instructor_notebook(nb)
    for edition in (student, instructor, source_notebook(nb, path.stem)):
        for cell in edition.cells:
            if cell.cell_type == "markdown":
                assert not LEFTOVERS.search(cell.source), (path.stem, cell.source[:300])
                assert not re.search(r"^(`{3,}|:{3,})\{", cell.source, re.M), cell.source[:300]
    page, _ = HTMLExporter().from_notebook_node(student)
    assert not LEFTOVERS.search(page) and "{cite}" not in page and ":class:" not in page
    assert page.count(">Exercise ") >= len(exercises)
    assert not re.search(r'href="[^"]*\.md[#"]', page), "a link to a .md file is left"
    links = re.findall(r'href="(\d\d[a-z]?_[a-z_]+)\.ipynb"', page)
    assert all((NOTEBOOKS / f"{name}.md").exists() for name in links)
    cited = re.findall(r"\{cite\}`([^`]+)`", path.read_text(encoding="utf-8"))
    if cited:
        assert "Works cited" in page and re.search(r"\(([A-Z][^()]*, )?(19|20)\d\d[a-z]?[;),]", page)


def test_citations_read_author_year():
    rewriter = Rewriter(read_bibliography(), {"04_self_attention"})
    text = rewriter.markdown("As {cite}`vaswani2017attention,bahdanau2015neural` show; see "
                             "[chapter 4](04_self_attention.md) and [the\nappendix](../book/running.md).")
    assert text == ("As (Vaswani et al., 2017; Bahdanau et al., 2015) show; see "
                    "[chapter 4](04_self_attention.ipynb) and the\nappendix (in the course's book).")
    assert rewriter.markdown("Vaswani et al. {cite}`vaswani2017attention`") == "Vaswani et al. (2017)"
    assert rewriter.works_cited().startswith("## Works cited\n\n- Vaswani, Shazeer, Parmar")
    assert "Kaiser" in rewriter.works_cited() and "{" not in rewriter.works_cited()
    block = rewriter.markdown("```{exercise} Title\n:label: ex-a\n\nDo it.\n```\n\n"
                              "```{admonition} Note\n:class: tip\nRead $x$.\n```")
    assert block == "### Exercise 1: Title (ex-a)\n\nDo it.\n\n> **Note**\n>\n> Read $x$."


def test_references_read_as_titles_and_student_headings_carry_no_label():
    """A ``{ref}`` once read "(see decoder-positions)", a heading "(ex-a)".

    The label a reference points at is the book's internal name; the learner reads the
    title it stands for. The instructor edition keeps the label in the heading, where it
    names the exercise's rubric and nbgrader ids.
    """
    cells = [nbformat.v4.new_markdown_cell(source) for source in (
        "See {ref}`sec-b`, [](#fig-a), [this figure](#fig-a), {numref}`fig-a`;\n"
        "exercise {ref}`ex-a` asks why (chapter 11, {ref}`chapter-real-model`).",
        "(sec-b)=\n## Section B, {math}`x`",
        "```{figure} a.png\n:name: fig-a\n\nA caption.\n```",
        "```{exercise} Title\n:label: ex-a\n\nDo it.\n```",
    )]
    student = plain_cells(copy.deepcopy(cells), {"04_self_attention"}, {}, labels=False)
    assert student[0].source == (
        "See Section B, $x$, A caption., this figure, A caption.;\n"
        "exercise 1 asks why (chapter 11, A real language model, opened).")
    assert student[3].source == "### Exercise 1: Title\n\nDo it."
    instructor = plain_cells(copy.deepcopy(cells), {"04_self_attention"}, {})
    assert instructor[0].source == student[0].source
    assert instructor[3].source == "### Exercise 1: Title (ex-a)\n\nDo it."


def test_chapter_references_and_headings_in_the_editions(chapter):
    path, nb, _, exercises = chapter
    student, instructor = student_notebook(nb, path.stem), instructor_notebook(nb)
    refs = re.findall(r"\{(?:ref|numref)\}`([A-Za-z0-9_:-]+)`|\]\(#([A-Za-z0-9_:-]+)\)",
                      path.read_text(encoding="utf-8"))
    for edition in (student, instructor):
        text = "\n".join(c.source for c in edition.cells if c.cell_type == "markdown")
        # the instructor's labels, where they belong: exercise headings, rubric titles
        text = re.sub(r"(?m)^(### Exercise|\*\*Rubric:) .*$", "", text)
        for label in (a or b for a, b in refs):
            assert not re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text), label
    text = _text(student)
    headings = re.findall(r"^### Exercise \d+.*$", text, re.M)
    assert len(headings) == len(exercises)
    assert not [h for h in headings if re.search(r"\(ex-[a-z0-9-]+\)$", h)], headings
    heading = r"^### Exercise \d+.* \((ex-[a-z0-9-]+)\)$"
    labelled = re.findall(heading, _text(instructor), re.M)
    assert labelled == [e.label for e in exercises]
    if path.stem == "07_decoder_only":
        assert "(both in Positions, old and new)" in text, "the section's title, not label"


def _chapter_imports(nb) -> str:
    """The import statements of the chapter's code cells (what a solution may use)."""
    imports = []
    for cell in nb.cells:
        if cell.cell_type == "code" and not cell.source.startswith("%"):
            lines = cell.source.split("\n")
            for node in ast.parse(cell.source).body:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    imports += lines[node.lineno - 1:node.end_lineno]
    return "\n".join(imports)


def test_solutions_put_back_into_the_stubs_pass_every_check(chapter):
    path, nb, _, exercises = chapter
    namespace: dict = {}
    exec(_chapter_imports(nb), namespace)  # noqa: S102 - the course's own sources
    for ex in (e for e in exercises if e.kind == "coding"):
        answer = answer_source(ex, nb.cells[ex.stub_cell].source)
        assert BEGIN in answer and END in answer
        exec(answer, namespace)  # noqa: S102
        result = namespace[ex.check](namespace[ex.function])
        assert result.passed, f"{ex.label}: {result}"
        exec(nb.cells[ex.stub_cell].source, namespace)  # noqa: S102 - the stub itself fails
        assert not namespace[ex.check](namespace[ex.function]).passed, ex.label
        exec(answer, namespace)  # noqa: S102 - a later answer may call this one (chapter 7b)


def test_nbgrader_source_marks_every_exercise(chapter):
    path, nb, _, exercises = chapter
    source = source_notebook(nb, path.stem)
    meta = {c.metadata["nbgrader"]["grade_id"]: (c.cell_type, c.metadata["nbgrader"])
            for c in source.cells if "nbgrader" in c.metadata}
    for ex in exercises:
        kind, answer = meta[f"{ex.label}-answer"]
        assert answer["solution"] and not answer["locked"]
        if ex.kind == "coding":
            kind_check, check = meta[f"{ex.label}-check"]
            assert (kind, kind_check) == ("code", "code")
            assert check["grade"] and check["locked"] and check["points"] == 1
        else:
            assert kind == "markdown" and answer["grade"] and answer["points"] == 1
            kind_rubric, rubric = meta[f"{ex.label}-rubric"]  # read-only, for the formgrader
            assert kind_rubric == "markdown" and rubric["locked"] and not rubric["grade"]
    assert len(meta) == 2 * len(exercises)
    nbformat.validate(source)


def test_command_writes_the_editions_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "class"
    assert main([str(out), "--chapter", "04_self_attention", "--markdown"]) == 0
    assert (out / "README.md").read_text().startswith("# attncourse")
    student = nbformat.read(out / "student" / "04_self_attention.ipynb", as_version=4)
    assert "your code here" in _text(student)
    assert (out / "student" / "04_self_attention.md").exists()
    assert (out / "instructor" / "04_self_attention.ipynb").exists()
    assert (out / "nbgrader" / "source" / "04_self_attention" / "04_self_attention.ipynb").exists()
    # The licence files the notice and the README name are there, as the course's.
    root = Path(__file__).resolve().parents[2]
    readme = (out / "README.md").read_text()
    for folder in (out, out / "nbgrader" / "source" / "04_self_attention"):
        for name in ("LICENSE", "LICENSE-CONTENT"):
            assert f"`{name}`" in readme
            assert (folder / name).read_bytes() == (root / name).read_bytes(), folder / name
    # Instructor edition only: rubrics and slides, offline (no script or style from the web).
    rubrics = (out / "instructor" / "rubrics.md").read_text()
    assert "ex-sa-scale" in rubrics and "ex-sa-cost" in rubrics and "Partial credit" in rubrics
    deck = (out / "instructor" / "slides" / "04_self_attention.slides.html").read_text()
    assert deck.count("<section") >= 5 and "Exercises" in deck
    assert not re.findall(r'(?:src|href)="(?:https?:)?//[^"]*"', deck)
    for asset in re.findall(r'(?:src|href)="([^"#][^"]*)"', deck):
        # figures of an executed chapter (when a book build left one) are embedded, not files
        assert asset.startswith("data:image/") or (out / "instructor" / "slides" / asset).is_file(), asset[:80]
    assert not list((out / "student").glob("*slides*")) and not (out / "student" / "rubrics.md").exists()
    capsys.readouterr()
    (out / "README.md").write_text("mine")
    assert main([str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--overwrite" in err
    assert (out / "README.md").read_text() == "mine"
    assert main([str(out), "--chapter", "04_self_attention", "--overwrite", "--no-nbgrader"]) == 0


def test_licence_files_missing_from_the_course_are_refused_not_named(tmp_path):
    from attncourse.course.notice import write_licences

    (tmp_path / "LICENSE").write_text("MIT")
    with pytest.raises(ValueError, match="LICENSE-CONTENT is missing"):
        write_licences(tmp_path / "out", root=tmp_path)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, words", [
    (["--chapter", "99_nope"], "--chapter '99_nope'"),
    (["--notebooks", "/nonexistent"], "--notebooks"),
])
def test_command_errors_are_one_line(tmp_path, capsys, argv, words):
    assert main([str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attncourse: error:") and words in err and err.count("\n") == 1


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert main([str(target), "--chapter", "04_self_attention"]) == 2
    assert "is a file" in capsys.readouterr().err


def test_python_m_attncourse_dispatches_student_edition(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "attncourse", "student-edition", str(tmp_path / "o"),
                           "--chapter", "04_self_attention", "--no-nbgrader"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o" / "student" / "04_self_attention.ipynb").exists()


def test_answer_cell_keeps_the_stubs_other_lines_and_the_solutions_helpers():
    from attncourse.course.exercises import Exercise

    ex = Exercise("c", "ex-a", "t", kind="coding", check="check_x", function="my_x", solution_code=[
        "import math\n\ndef helper(a):\n    return a\n\ndef my_x(a):\n    return helper(a) + 1\n\n"
        "result = check_x(my_x)\nassert result.passed"])
    stub = "SIZE = 3\n\ndef my_x(a):\n    ...   # your code here\n\nprint(SIZE)\ncheck_x(my_x)"
    assert answer_source(ex, stub).split("\n") == [
        "SIZE = 3", BEGIN, "import math", "def helper(a):", "    return a", "", "def my_x(a):",
        "    return helper(a) + 1", END, "print(SIZE)"]
    ex.solution_code = ["def my_x(a):\n    return a + 1\n\nresult = check_x(my_x)"]
    assert answer_source(ex, "def my_x(a):\n    ...   # your code here\n\ncheck_x(my_x)").split("\n") == [
        "def my_x(a):", f"    {BEGIN}", "    return a + 1", f"    {END}"]


def test_every_written_exercise_has_a_rubric_in_the_instructor_edition_only():
    from attncourse.course.rubrics import RUBRICS

    written = {ex.label: path for path in CHAPTERS for ex in split_notebook(read_chapter(path), path.stem)[1]
               if ex.kind == "written"}
    assert set(RUBRICS) == set(written), set(RUBRICS) ^ set(written)
    for label, path in written.items():
        nb = read_chapter(path)
        instructor = _text(instructor_notebook(nb, path.stem))
        assert f"**Rubric: {label}**" in instructor
        assert "Rubric" not in _text(student_notebook(nb, path.stem))
    for rubric in RUBRICS.values():
        assert min(len(rubric.full), len(rubric.partial), len(rubric.none)) > 15


def test_every_handed_out_copy_carries_the_licence_notice(tmp_path):
    # A copy handed out travels: title, authors, CC BY-SA 4.0 with its link for the text, MIT for the code.
    import re as _re

    from attncourse.course.editions import chapter_editions
    from attncourse.course.nbgrader_source import source_notebook
    from attncourse.course.notice import AUTHORS, CC_BY_SA, NOTICE, TITLE
    from attncourse.course.slides import deck

    config = (Path(__file__).resolve().parents[2] / "_config.yml").read_text(encoding="utf-8")
    assert _re.search(r'^title: "(.*)"$', config, _re.M).group(1) == TITLE
    assert _re.search(r"^author: (.*)$", config, _re.M).group(1) == AUTHORS
    assert CC_BY_SA in NOTICE and "MIT" in NOTICE and "CC BY-SA 4.0" in NOTICE
    chapter = Path(__file__).resolve().parents[2] / "notebooks" / "04_self_attention.md"
    student, instructor = chapter_editions(chapter)
    from attncourse.course.exercises import read_chapter

    for nb in (student, instructor, source_notebook(read_chapter(chapter), chapter.stem)):
        assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source == NOTICE
    from attncourse.course.notice import NOTICE_TEXT

    assert NOTICE_TEXT in deck(student).cells[0].source and CC_BY_SA in NOTICE_TEXT


def test_the_nbgrader_source_holds_each_written_answers_rubric():
    from attncourse.course.exercises import read_chapter
    from attncourse.course.nbgrader_source import source_notebook
    from attncourse.course.rubrics import RUBRICS

    chapter = Path(__file__).resolve().parents[2] / "notebooks" / "04_self_attention.md"
    nb = source_notebook(read_chapter(chapter), chapter.stem)
    written = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
               and c.cell_type == "markdown"]
    assert written
    for cell in written:
        # The rubric is in the read-only cell after the answer, inside nbgrader's mark
        # scheme (tests/course/test_rubrics_nbgrader.py runs nbgrader on it).
        label = cell.metadata["nbgrader"]["grade_id"].removesuffix("-answer")
        after = nb.cells[nb.cells.index(cell) + 1]
        assert after.metadata["nbgrader"]["grade_id"] == f"{label}-rubric"
        assert RUBRICS[label].markdown() in after.source and RUBRICS[label].full not in cell.source


def test_links_between_chapters_point_at_the_sibling_assignment_folders():
    # In nbgrader releases each chapter sits in its own assignment folder.
    from attncourse.course.exercises import read_chapter
    from attncourse.course.nbgrader_source import LINKS_NOTE, source_notebook

    root = Path(__file__).resolve().parents[2] / "notebooks"
    chapter = root / "06_transformer.md"
    nb = source_notebook(read_chapter(chapter), chapter.stem)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    links = re.findall(r"\]\(([^)]+\.ipynb)\)", text)
    assert links and all(re.fullmatch(r"\.\./(\w+)/\1\.ipynb", link) for link in links), links
    assert all((root / f"{link.split('/')[1]}.md").exists() for link in links)
    assert nb.cells[1].source == LINKS_NOTE


def test_decks_show_the_chapters_display_equations():
    from attncourse.course.editions import chapter_editions
    from attncourse.course.slides import deck

    root = Path(__file__).resolve().parents[2] / "notebooks"
    for name in ("04_self_attention", "08_attention_at_scale"):
        student, _ = chapter_editions(root / f"{name}.md")
        equations = re.findall(r"\$\$.+?\$\$", "\n".join(c.source for c in student.cells), re.S)
        slides = "\n".join(c.source for c in deck(student).cells)
        assert equations and equations[0] in slides, name


def test_every_figure_caption_is_under_its_figure_in_the_editions(chapter):
    """Issue 64: the book prints captions from cell metadata, which JupyterLab never shows."""
    from attncourse.course.editions import figure_caption

    path, nb, _, _ = chapter
    captions = [figure_caption(c) for c in nb.cells if c.cell_type == "code"]
    captions = [c for c in captions if c]
    for edition in (student_notebook(nb, path.stem), instructor_notebook(nb, path.stem)):
        shown = [c.source for c in edition.cells
                 if c.cell_type == "markdown" and c.source.startswith("**Figure.** ")]
        assert len(shown) == len(captions), path.stem
        for text, caption in zip(shown, captions):
            first = next(w for w in caption.split() if w.isalpha())   # roles are rewritten
            assert first in text, (path.stem, caption[:40])
