"""tools/move_chapters.py: the rewriting of imports, on made-up text, and the layout it keeps."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import move_chapters as mc  # noqa: E402

MOVES = {"attncourse.checks.heads": "attncourse.chapters.ch09_what_heads_learn.checks",
         "attncourse.viz.luong": "attncourse.chapters.ch03_attention_family.figures"}
GRAPH = SimpleNamespace(reexports={
    ("attncourse.checks", "check_copying_score"): "attncourse.checks.heads",
    ("attncourse.checks", "check_softmax"): "attncourse.checks.self_attention",
    ("attncourse.viz", "plot_cost"): "attncourse.viz.luong",
    ("attncourse.viz", "heatmap"): "attncourse.viz.heatmap",
})


def rewrite(text: str, path: str = "notebooks/x.md") -> str:
    rewriter = mc.Rewriter(MOVES, GRAPH)
    out = rewriter.rewrite(text, path)
    assert not rewriter.problems, rewriter.problems
    return out


def test_a_package_import_is_split_between_what_stays_and_what_moved():
    out = rewrite("from attncourse.checks import check_copying_score, check_softmax\n")
    assert out == ("from attncourse.checks import check_softmax\n"
                   "from attncourse.chapters.ch09_what_heads_learn.checks import "
                   "check_copying_score\n")
    assert rewrite(out) == out  # a second run changes nothing


def test_a_moved_module_is_renamed_everywhere_and_long_imports_wrap():
    text = ("import attncourse.checks.heads as H\n"
            "see ``attncourse.checks.heads`` and attncourse/checks/heads.py;"
            " not attncourse.checks.headsx\n"
            "from attncourse.checks.heads import (aaaaaaaaaaaa, bbbbbbbbbbbbbb,\n"
            "                                     cccccccccccccccc, dddddddddddd)\n")
    out = rewrite(text)
    assert "import attncourse.chapters.ch09_what_heads_learn.checks as H\n" in out
    assert "``attncourse.chapters.ch09_what_heads_learn.checks``" in out
    assert "attncourse/chapters/ch09_what_heads_learn/checks.py" in out
    assert "attncourse.checks.headsx" in out
    assert all(len(line) <= mc.WIDTH for line in out.splitlines() if "import" in line)
    assert "aaaaaaaaaaaa, bbbbbbbbbbbbbb" in out and "dddddddddddd)" in out


def test_an_attribute_of_a_moved_name_becomes_the_bare_name_and_its_call_moves_left():
    text = ("from attncourse import viz\n"
            "viz.heatmap(x)\n"
            "viz.plot_cost(a,\n"
            "              b)\n")
    out = rewrite(text)
    assert out == ("from attncourse import viz\n"
                   "from attncourse.chapters.ch03_attention_family.figures import plot_cost\n"
                   "viz.heatmap(x)\n"
                   "plot_cost(a,\n"
                   "          b)\n")
    # viz unused after the rewrite: its import goes
    out = rewrite("from attncourse import viz\nviz.plot_cost(a)\n")
    assert out == ("from attncourse.chapters.ch03_attention_family.figures import plot_cost\n"
                   "plot_cost(a)\n")


def test_a_name_the_file_already_binds_stops_the_rewrite():
    rewriter = mc.Rewriter(MOVES, GRAPH)
    rewriter.rewrite("from attncourse import viz\nplot_cost = 1\nviz.plot_cost(a)\n", "n.md")
    assert rewriter.problems and "already binds" in rewriter.problems[0]


def test_an_import_inside_a_string_stays_one_line_and_a_long_string_splits_after_it():
    tail = "explorer = SomeExplorer(max_len=16)"
    out = rewrite(f'CELLS = [\n    "from attncourse.checks import check_copying_score\\n{tail}",\n]\n', "t.py")
    assert out == ('CELLS = [\n'
                   '    "from attncourse.chapters.ch09_what_heads_learn.checks import '
                   'check_copying_score\\n"\n'
                   f'    "{tail}",\n]\n')
    short = 'X = "from attncourse.checks import check_copying_score\\nx"\n'
    assert rewrite(short, "t.py").count("\n") == 1  # within ruff's limit: one line


def test_every_chapter_only_module_is_in_its_folder():
    # Once the script has run, a new module that one notebook alone uses must go into that
    # chapter's folder (or the script's table): --check fails otherwise.
    if not (ROOT / "attncourse" / "chapters").exists():
        pytest.skip("tools/move_chapters.py has not been run on this checkout yet")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "move_chapters.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_rubric_label_in_two_chapters_is_refused(monkeypatch):
    if not (ROOT / "attncourse" / "chapters").exists():
        pytest.skip("tools/move_chapters.py has not been run on this checkout yet")
    import attncourse.chapters as chapters
    from attncourse.course import rubrics

    assert set(rubrics.RUBRICS) == {label for m in chapters.modules("rubrics") for label in m.RUBRICS}
    twice = [SimpleNamespace(RUBRICS={"ex-a": 1}), SimpleNamespace(RUBRICS={"ex-a": 2, "ex-b": 3})]
    monkeypatch.setattr(chapters, "modules", lambda role: twice)
    with pytest.raises(ValueError, match="rubrics given by two chapters: ex-a"):
        rubrics._chapters_rubrics()
    assert chapters.check.__module__ == "attncourse.chapters"
    monkeypatch.undo()
    assert chapters.check("check_copying_score").__module__.endswith("ch09_what_heads_learn.checks")
    with pytest.raises(AttributeError, match="no check named 'check_nothing'"):
        chapters.check("check_nothing")
