"""The student edition's cells that run a learner's unwritten function wait for it."""

import ast
import textwrap

import nbformat

from attncourse.checks import written
from attncourse.course.waiting import wait_for_answers

STUB = "def my_f(x):\n    ...   # your code here\n\ncheck_f(my_f)"
CELLS = [
    STUB,                                           # 0: the exercise's stub: unchanged
    "y = my_f(2)\nprint(y)",                        # 1: runs it: waits
    "z = y + 1\nz",                                 # 2: reads y, which came from my_f: waits
    "fig, ax = make()\nax.plot([1])",               # 3: its own names only: unchanged
    "y = 5",                                        # 4: y rebound, no longer from my_f
    "y * 2",                                        # 5: unchanged
    "%timeit my_f(1)",                              # 6: a magic: left as it is
]


def _guarded_sources():
    cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    return [cell.source for cell in wait_for_answers(cells)]


def test_cells_that_need_the_function_or_its_results_are_guarded_and_no_others():
    out = _guarded_sources()
    guarded = [i for i, source in enumerate(out) if "if written(my_f):" in source]
    assert guarded == [1, 2]
    assert [out[i] for i in (0, 3, 4, 5, 6)] == [CELLS[i] for i in (0, 3, 4, 5, 6)]
    for source in out[:6]:
        ast.parse(source)                            # still Python
    assert out[2].rstrip().endswith("display(z)")    # the value is still shown


def _stub(x):
    ...   # your code here


def _answer(x):
    return 2 * x


def test_written_tells_what_a_cell_waits_for_and_lets_answers_through(capsys):
    assert not written(_answer, _stub)
    assert "This cell runs your `_stub`: it waits until you write it" in capsys.readouterr().out
    assert written(_answer)
    assert capsys.readouterr().out == ""


def test_a_guarded_cell_does_nothing_before_the_answer_and_everything_after(capsys):
    cell = _guarded_sources()[1]
    namespace = {"my_f": _stub, "print": print}
    exec(cell, namespace)
    assert "y" not in namespace and "waits until you write" in capsys.readouterr().out
    source = cell.replace("written(my_f)", "written(_answer)")
    namespace = {"my_f": _answer, "_answer": _answer}
    exec(textwrap.dedent(source), namespace)
    assert namespace["y"] == 4 and capsys.readouterr().out.strip() == "4"
