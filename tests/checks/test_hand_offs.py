"""The cheat suite: every auto-graded exercise refuses one-line hand-offs.

For each coding exercise of the chapters, in a namespace holding the chapter's imports
(as a notebook's globals):

- the chapter's own solution, defined in an "answer cell", passes its check;
- every cheat of ``tests/fixtures/hand_off_cheats.py`` is answered "not accepted";
- so is a function that hands the work to a helper defined in another cell (the chapter's
  own code above the exercise): here the solution itself, renamed.
"""

from __future__ import annotations

import ast
import functools
import itertools
import linecache
import sys
from pathlib import Path

import pytest

import attncourse.chapters as chapters
import attncourse.checks as checks
from attncourse.chapters.ch08_attention_at_scale.checks import (
    check_causal_linear_attention,
)
from attncourse.checks.guard import EXERCISE_FUNCTIONS
from attncourse.checks.hand_offs import HAND_OFFS
from attncourse.course.exercises import chapter_exercises, read_chapter
from tests.fixtures.hand_off_cheats import CHEATS

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))
_cells = itertools.count()


def coding_exercises():
    """``(chapter, exercise)`` of every coding exercise, one per check."""
    seen = {}
    for chapter in CHAPTERS:
        for ex in chapter_exercises(chapter):
            if ex.kind == "coding" and ex.check not in seen:
                seen[ex.check] = (chapter, ex)
    return list(seen.values())


EXERCISES = coding_exercises()


def run_cell(source: str, namespace: dict) -> None:
    """Run ``source`` as a notebook cell would: its own file name, its lines in linecache."""
    filename = f"<attncourse-test-cell-{next(_cells)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102


@functools.cache
def _imports(chapter: Path) -> str:
    lines = []
    for cell in read_chapter(chapter).cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell.source.split("\n") if not line.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        lines += [ast.get_source_segment(source, node) for node in tree.body
                  if isinstance(node, (ast.Import, ast.ImportFrom))]
    return "\n".join(lines)


def chapter_namespace(chapter: Path) -> dict:
    """A notebook's globals after the chapter's imports."""
    namespace = {"__name__": "__main__"}
    run_cell(_imports(chapter), namespace)
    return namespace


def solution_source(ex) -> str:
    """The solution cell's statements up to its function's definition (helpers included)."""
    source = ex.solution_code[0]
    tree = ast.parse(source)
    end = next(node for node in tree.body if getattr(node, "name", None) == ex.function)
    return "\n".join(source.split("\n")[:end.end_lineno])


def earlier_answers(chapter: Path, ex) -> list:
    """The chapter's coding exercises before ``ex``, each in its own cell."""
    before = []
    for other in chapter_exercises(chapter):
        if other.label == ex.label:
            break
        if other.kind == "coding":
            before.append(other)
    return before


def check_of(ex):
    return chapters.check(ex.check)


def triton_missing(ex) -> bool:
    from attncourse.kernels.triton_setup import TRITON_AVAILABLE
    return ex.check == "check_causal_early_exit" and not TRITON_AVAILABLE


def test_every_check_has_its_hand_off_rules_and_cheats():
    names = {ex.check for _, ex in EXERCISES}
    assert names <= set(HAND_OFFS) and names <= set(CHEATS)
    # The learner's own earlier answers stay usable: the guard knows their names.
    functions = {ex.function for chapter in CHAPTERS for ex in chapter_exercises(chapter)
                 if ex.kind == "coding"}
    assert functions == EXERCISE_FUNCTIONS


@pytest.mark.parametrize("chapter,ex", EXERCISES, ids=[ex.check for _, ex in EXERCISES])
def test_the_solution_passes_and_every_cheat_is_refused(chapter, ex):
    if triton_missing(ex):
        pytest.skip("triton is not installed")
    check = check_of(ex)
    namespace = chapter_namespace(chapter)
    for earlier in earlier_answers(chapter, ex):  # answers this one may call (chapter 7b)
        run_cell(solution_source(earlier), namespace)
    run_cell(solution_source(ex), namespace)
    result = check(namespace[ex.function])
    assert result.passed, result
    refused = []
    cheats = [(what, source.replace("FN", ex.function)) for what, source in CHEATS[ex.check]]
    if ex.check != "check_causal_early_exit":
        helper = solution_source(ex).replace(f"def {ex.function}(", "def chapter_helper(")
        cheats.append(("the chapter's helper, in another cell",
                       f"def {ex.function}(*args, **kwargs):\n    return chapter_helper(*args, **kwargs)"))
    for what, source in cheats:
        space = dict(namespace)
        if what.startswith("the chapter's helper"):
            run_cell(helper, space)
        run_cell(source, space)
        result = check(space[ex.function])
        if result.passed or not (result.message.startswith("not accepted")
                                 or result.message.startswith("expected a @jit kernel")):
            refused.append(f"{what}: {result}")
        else:
            assert result.hint.startswith("Allowed: ") or "triton.jit" in result.hint, result.hint
    assert not refused, "\n".join(refused)


def _chapter(check: str) -> tuple[Path, object]:
    return next((chapter, ex) for chapter, ex in EXERCISES if ex.check == check)


def test_an_earlier_answer_in_another_cell_stays_usable():
    chapter, softmax_ex = _chapter("check_softmax")
    namespace = chapter_namespace(chapter)
    run_cell(solution_source(softmax_ex), namespace)
    run_cell("def my_attention(q, k, v, mask=None):\n"
             "    s = q @ k.T / np.sqrt(k.shape[1])\n"
             "    allowed = np.ones(s.shape, bool) if mask is None else mask\n"
             "    w = my_softmax(np.where(allowed, s, -1e300), axis=-1) * allowed\n"
             "    w = w / np.where(w.sum(-1, keepdims=True) > 0, w.sum(-1, keepdims=True), 1)\n"
             "    return w @ v, w", namespace)
    assert checks.check_scaled_dot_product(namespace["my_attention"]).passed


def test_an_allowed_building_block_is_not_refused():
    chapter, ex = _chapter("check_causal_linear_attention")
    namespace = chapter_namespace(chapter)
    run_cell("def my_causal_linear(q, k, v):\n"
             "    from attncourse.functional.linear_attention import elu_feature_map\n"
             "    phi = elu_feature_map\n"
             "    S, z = np.zeros((k.shape[1], v.shape[1])), np.zeros(k.shape[1])\n"
             "    out = np.zeros((len(q), v.shape[1]))\n"
             "    for i in range(len(q)):\n"
             "        S += np.outer(phi(k[i]), v[i])\n"
             "        z += phi(k[i])\n"
             "        out[i] = phi(q[i]) @ S / (phi(q[i]) @ z)\n"
             "    return out", namespace)
    assert check_causal_linear_attention(namespace["my_causal_linear"]).passed


def test_a_refusal_names_the_hand_off_and_what_is_allowed():
    result = checks.check_softmax(lambda x, axis=-1: __import__("scipy.special").special.softmax(x, axis))
    assert not result.passed and result.cases_passed == 0
    assert result.message.startswith("not accepted: your function hands the work to `scipy.special.")
    assert result.hint == f"Allowed: {HAND_OFFS['check_softmax'].uses}"


def test_watching_requires_what_must_run_and_restores_the_profiler():
    from attncourse.checks.guard import HandOffs, watching

    def tracer(*args):
        return None

    sys.setprofile(tracer)
    try:
        rules = HandOffs("x", must_call=("triton.runtime.jit.JITFunction.run",))
        with watching(rules, len) as seen:
            len("no kernel")
        assert [hand_off.kind for hand_off in seen] == ["missing"]
        assert sys.getprofile() is tracer
    finally:
        sys.setprofile(None)
