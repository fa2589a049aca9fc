"""The claims sweep: tools/claims.py's assert rewriter, and book/claims.json fresh.

``make claims`` executes every chapter with its ``assert`` statements rewritten to record
their operands and margins (``tools/claims.py``). The rewriter is tested here on snippets:
what it records, and that a false claim still raises. The freshness test holds
``book/claims.json`` to the chapters' code: a chapter whose code changed after its sweep
fails, naming the command that sweeps it again.
"""

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import jupytext
import pytest

from attncourse.course import claims as book_claims
from attncourse.runtime import data_seed, runs_dir, seed_offset, training_seed

ROOT = Path(__file__).resolve().parents[2]


def _code_of(path: Path) -> str:
    """A module's source, or a chapter's code cells (magics dropped) as one module."""
    if path.suffix == ".py":
        return path.read_text(encoding="utf-8")
    cells = [c.source for c in jupytext.read(path).cells if c.cell_type == "code"]
    return "\n".join(line for cell in cells for line in cell.splitlines()
                     if not line.lstrip().startswith(("%", "!")))


def _load_tool():
    spec = importlib.util.spec_from_file_location("claims_tool", ROOT / "tools" / "claims.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


tool = _load_tool()


def run_cell(source: str, first_line: int = 1, **names):
    """Rewrite ``source``, execute it with a fresh recorder; the recorder and metadata."""
    new, metas = tool.rewrite_source(source, first_line)
    recorder = tool.Recorder(Path("unused.json"))
    scope = {"_claims": recorder, **names}
    error = None
    try:
        exec(compile(new, "<cell>", "exec"), scope)
    except AssertionError as err:
        error = err
    return recorder, metas, error, new


def worst(recorder, claim_id):
    return recorder.claims[claim_id]["worst"]


# ---- the rewriter -----------------------------------------------------------------------

def test_a_comparison_records_its_operands_margin_and_bound():
    recorder, metas, error, _ = run_cell("x = 0.3\nassert x < 0.5, 'too big'\n", first_line=10)
    assert error is None
    assert metas == [{"id": "11", "line": 11, "expression": "x < 0.5", "kind": "comparison"}]
    run = worst(recorder, "11")
    assert run["values"] == [0.3, 0.5] and run["bound"] == 0.5 and run["held"]
    assert run["margin"] == pytest.approx(0.2) and run["relative_margin"] == pytest.approx(0.4)


def test_greater_than_measures_from_the_bound_on_either_side():
    recorder, _, _, _ = run_cell("loss = -3.5\nassert loss < -3.0\nassert 2.0 > loss\n"
                                 "acc = 0.97\nassert acc >= 0.95\n")
    assert worst(recorder, "2")["margin"] == pytest.approx(0.5)
    assert worst(recorder, "2")["relative_margin"] == pytest.approx(0.5 / 3)
    assert worst(recorder, "3")["bound"] == 2.0  # the written number, on the left
    assert worst(recorder, "5")["margin"] == pytest.approx(0.02)


def test_a_false_claim_is_recorded_then_raises_with_its_message():
    recorder, _, error, _ = run_cell("acc = 0.977\nassert acc >= 0.98, f'only {acc}'\n")
    assert isinstance(error, AssertionError) and str(error) == "only 0.977"
    run = worst(recorder, "2")
    assert run["held"] is False and recorder.claims["2"]["held"] is False
    assert run["margin"] == pytest.approx(-0.003)


def test_chains_and_conjunctions_keep_the_smallest_margin():
    source = ("r, s = 0.5, 0.12\n"
              "assert 0.45 < r < 0.55 and 0.10 < s < 0.15\n"
              "assert before < 0.4 < 0.7 < after\n"
              "assert max(f) - min(f) <= 30 and 70 <= min(f) <= max(f) <= 130\n")
    recorder, _, error, _ = run_cell(source, before=0.2, after=0.75, f=[100, 110])
    assert error is None
    assert worst(recorder, "2")["values"] == [0.45, 0.5, 0.55, 0.10, 0.12, 0.15]
    # the tightest part relative to its bound: 0.55 - r (9 %), not s - 0.10 (20 %)
    assert worst(recorder, "2")["margin"] == pytest.approx(0.05)
    assert worst(recorder, "2")["bound"] == 0.55
    # 0.4 < 0.7 compares two written numbers: no margin; after - 0.7 is the smallest
    assert worst(recorder, "3")["margin"] == pytest.approx(0.05)
    # min(f) <= max(f) only orders two measured values: 130 - 110 and 100 - 70 count
    assert worst(recorder, "4")["margin"] == pytest.approx(20)


def test_an_assert_in_a_loop_counts_its_runs_and_keeps_the_worst():
    recorder, _, error, _ = run_cell("for loss in (0.2, 0.9, 0.5):\n    assert loss < 1.0, loss\n")
    assert error is None
    assert recorder.claims["2"]["count"] == 3
    assert worst(recorder, "2")["values"] == [0.9, 1.0]
    assert worst(recorder, "2")["margin"] == pytest.approx(0.1)


def test_facts_without_a_margin_record_their_truth():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    source = ("assert np.allclose(a, a)\n"
              "assert torch.allclose(t, t) and all(v > 0 for v in a)\n"
              "assert len(a) == 3\n")
    recorder, metas, error, _ = run_cell(source, np=np, torch=torch, a=np.ones(3),
                                         t=torch.ones(2))
    assert error is None
    assert [m["kind"] for m in metas] == ["truth", "truth", "truth"]
    assert worst(recorder, "1")["values"] == [True] and worst(recorder, "1")["margin"] is None
    assert worst(recorder, "2")["values"] == [True, True]
    assert worst(recorder, "3")["values"] == [3, 3]


def test_an_absolute_tolerance_records_the_largest_difference_as_its_margin():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    calls = []

    def measured(x):
        calls.append(x)                           # evaluated once, as without the recorder
        return x

    source = ("assert torch.allclose(measured(t), t + 4e-4, rtol=0, atol=1e-3)\n"
              "assert np.allclose(a, a + 2e-6, atol=1e-5, rtol=0.0) and len(a) == 3\n"
              "assert np.allclose(a, a + 2e-6, atol=1e-5)\n"        # a relative tolerance
              "assert torch.allclose(t, t + 0.1, rtol=0, atol=0.05), 'far'\n")
    recorder, metas, error, _ = run_cell(source, np=np, torch=torch, a=np.ones(3),
                                         t=torch.ones(2, dtype=torch.float64),
                                         measured=measured)
    assert [m["kind"] for m in metas] == ["comparison", "comparison", "truth", "comparison"]
    assert len(calls) == 1
    first = worst(recorder, "1")
    assert first["values"][0] == pytest.approx(4e-4) and first["values"][1] == 1e-3
    assert first["margin"] == pytest.approx(6e-4) and first["relative_margin"] == pytest.approx(0.6)
    assert worst(recorder, "2")["margin"] == pytest.approx(8e-6)
    assert worst(recorder, "3")["margin"] is None
    assert isinstance(error, AssertionError) and str(error) == "far"       # same truth
    assert worst(recorder, "4")["held"] is False
    assert worst(recorder, "4")["margin"] == pytest.approx(-0.05)


def test_numpy_and_torch_values_become_plain_json():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    recorder, _, error, _ = run_cell("assert gap.max() < 1e-4\nassert t < 2\nassert v < 5\n",
                                     gap=np.array([1e-6, 3e-6]), t=torch.tensor(1.5),
                                     v=torch.tensor([4.0]))
    assert error is None
    assert worst(recorder, "1")["values"] == [3e-6, 1e-4]
    assert worst(recorder, "2")["values"] == [1.5, 2]
    assert worst(recorder, "3")["values"][0] == {"min": 4.0, "max": 4.0, "shape": [1]}
    assert worst(recorder, "3")["margin"] == pytest.approx(1.0)
    json.dumps(recorder.claims)  # every value is JSON
    assert tool.summarise(torch.tensor([[1.0, -2.0]])) == {"min": -2.0, "max": 1.0,
                                                           "shape": [1, 2]}
    assert tool.summarise(float("nan")) == "nan" and tool.summarise(np.int64(3)) == 3
    assert tool.margin_of("<", np.array([0.1, 0.7]), 1.0, "right")["margin"] == \
        pytest.approx(0.3)  # an array's worst element
    # an ambiguous truth raises as the plain assert would
    with pytest.raises(RuntimeError):
        run_cell("assert v < 5\n", v=torch.tensor([1.0, 4.0]))


def test_evaluation_order_and_short_circuits_are_python_s():
    calls = []

    def f(name, value):
        calls.append(name)
        return value

    recorder, _, error, _ = run_cell("assert f('a', 1) < f('b', 0) < f('c', 2) or f('d', True)\n",
                                     f=f)
    assert error is None and calls == ["a", "b", "d"]  # c is never evaluated, as in Python
    assert recorder.claims["1"]["held"] is True


def test_the_rewritten_cell_keeps_its_lines():
    source = ("x = 1\n"
              "assert (x > 0\n"
              "        and x < 2)  # a comment\n"
              "y = 'é'; assert y == 'é'\n"
              "raise ValueError('here')\n")
    new, metas = tool.rewrite_source(source, 100)
    assert new.count("\n") == source.count("\n")
    assert [m["line"] for m in metas] == [101, 103]
    with pytest.raises(ValueError) as err:
        exec(compile(new, "<cell>", "exec"), {"_claims": tool.Recorder(Path("x.json"))})
    assert err.traceback[-1].lineno == 4  # traceback lines are the cell's own (0-based)


def test_walrus_asserts_are_evaluated_in_place():
    recorder, metas, error, _ = run_cell("assert (n := 3) > 2\nm = n\n")
    assert error is None and metas[0]["kind"] == "truth" and recorder.claims["1"]["held"]


def test_manual_seed_takes_the_offset(monkeypatch):
    seen = []

    class Torch:
        @staticmethod
        def manual_seed(value):
            seen.append(value)

    monkeypatch.setenv("ATTNCOURSE_SEED_OFFSET", "1000")
    run_cell("torch.manual_seed(0)\ntorch.manual_seed(7)\n", torch=Torch)
    assert seen == [1000, 1007]
    # a function's seed is its caller's (chapter 7b's checks call the learner's my_train)
    new, _ = tool.rewrite_source("def train(seed):\n    torch.manual_seed(seed)\n")
    assert new == "def train(seed):\n    torch.manual_seed(seed)\n"


def test_the_seed_offset_shifts_seeds_and_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path))
    monkeypatch.delenv("ATTNCOURSE_SEED_OFFSET", raising=False)
    assert seed_offset() == 0 and training_seed(3) == 3 and runs_dir("a") == tmp_path / "a"
    assert data_seed(3) == 3
    monkeypatch.setenv("ATTNCOURSE_SEED_OFFSET", "1000")
    assert training_seed(3) == 1003 and data_seed(999) == 1999
    assert runs_dir("a") == tmp_path / "seed-offset-1000" / "a"  # never the seed's own cache
    # a seed at or past the offset could shift onto one of native's: refused, not overlapped
    for shift in (training_seed, data_seed):
        for seed in (1000, 12345, -1):
            with pytest.raises(ValueError, match=r"outside \[0, ATTNCOURSE_SEED_OFFSET=1000\)"):
                shift(seed)
    for bad in ("one", "-5"):
        monkeypatch.setenv("ATTNCOURSE_SEED_OFFSET", bad)
        with pytest.raises(ValueError, match="ATTNCOURSE_SEED_OFFSET"):
            seed_offset()


def test_the_other_seeds_variant_is_disjoint_from_every_seed_a_chapter_writes():
    """Every integer literal a chapter passes as a seed is below the variant's offset, so its
    shifted seeds are none of native's (the runtime refuses the rest at run time too)."""
    import ast
    offset = tool.OTHER_SEEDS_OFFSET
    assert tool.VARIANTS["other-seeds"]["env"]["ATTNCOURSE_SEED_OFFSET"] == str(offset)
    seen = 0
    for path in sorted((ROOT / "notebooks").glob("*.md")) + sorted((ROOT / "attncourse").rglob("*.py")):
        for node in ast.walk(ast.parse(_code_of(path))):
            pairs = []
            if isinstance(node, ast.keyword) and node.arg:  # f(seed=3)
                pairs = [(node.arg, node.value)]
            elif isinstance(node, ast.arguments):  # def f(seed: int = 12345)
                named = node.posonlyargs + node.args
                pairs = list(zip([a.arg for a in named[len(named) - len(node.defaults):]],
                                 node.defaults))
                pairs += [(a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d]
            for name, value in pairs:
                if name.endswith("seed") and isinstance(value, ast.Constant) \
                        and isinstance(value.value, int):
                    seen += 1
                    assert 0 <= value.value < offset, (path, name, value.value)
    assert seen > 80  # the scan reaches them (87 on 7 December)


def chapter_asserts(chapter: str) -> list[dict]:
    """The recorded asserts of a chapter's current source, in order (the rewriter's metas)."""
    path = ROOT / "notebooks" / f"{chapter}.md"
    notebook = jupytext.read(path)
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    return [meta for cell, first in zip(cells, tool.code_cell_lines(path, notebook))
            for meta in tool.rewrite_source(cell.source, first)[1]]


@pytest.mark.parametrize("chapter", book_claims.chapter_names())
def test_every_assert_of_a_chapter_is_found_at_its_line(chapter):
    path = ROOT / "notebooks" / f"{chapter}.md"
    notebook = jupytext.read(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    found = 0
    for cell, first in zip(cells, tool.code_cell_lines(path, notebook)):
        new, metas = tool.rewrite_source(cell.source, first)
        compile(new, chapter, "exec")
        assert new.count("\n") == cell.source.count("\n")
        found += len(metas)
        for meta in metas:
            assert "assert" in lines[meta["line"] - 1], (chapter, meta)
    expected = sum(line.lstrip().startswith("assert ") for cell in cells
                   for line in cell.source.splitlines())
    assert found >= expected > 0


# ---- the book page and the file ---------------------------------------------------------

def test_the_page_says_what_is_missing_and_never_fails(tmp_path):
    absent = book_claims.page_markdown(tmp_path / "none.json")
    assert "does not exist" in absent
    (tmp_path / "bad.json").write_text("{not json")
    assert "does not exist" in book_claims.page_markdown(tmp_path / "bad.json")
    name = book_claims.chapter_names()[0]
    digest = book_claims.code_digest(ROOT / "notebooks" / f"{name}.md")
    partial = {"generated": "2026-11-28", "variants": {"native": {"env": {}}},
               "chapters": {name: {"digest": digest, "wall_seconds": {"native": 3.0},
                                   "status": {"native": "ok"}, "claims": [
                                       {"line": 5, "expression": "a | b < 1", "kind": "comparison",
                                        "values": {"native": [0.5, 1]},
                                        "held": {"native": True}, "margin": {"native": 0.5},
                                        "relative_margin": {"native": 0.5},
                                        "bound": {"native": 1}, "count": {"native": 1}},
                                       {"line": 9, "kind": "truth"}]}}}
    (tmp_path / "partial.json").write_text(json.dumps(partial))
    page = book_claims.page_markdown(tmp_path / "partial.json")
    assert "**Not swept yet**" in page and book_claims.chapter_names()[1] in page
    assert "`a \\| b < 1` (5) | 0.5, 1 | 1 | 0.5 (native, 50.0% of the bound) |" in page
    assert "1 more claim without a margin" in page and "line 9)" in page   # which, not only how many


def test_the_page_counts_the_checks_the_sweep_cannot_record(tmp_path):
    # issue 61: np.testing and torch.testing calls carry no margin; the page says how many
    chapter = tmp_path / "x.md"
    chapter.write_text("np.testing.assert_allclose(a, b)\ntorch.testing.assert_close(c, d)\n"
                       "numpy.testing.assert_array_equal(e, f)\nassert a < b\n")
    assert book_claims.testing_calls(chapter) == 3
    assert book_claims.testing_calls(tmp_path / "absent.md") == 0
    name = "04_self_attention"
    entry = {"wall_seconds": {"native": 1}, "status": {"native": "ok"}, "claims": []}
    count = book_claims.testing_calls(ROOT / "notebooks" / f"{name}.md")
    assert count > 0 and f"{count} `np.testing` or `torch.testing` checks" in \
        book_claims.chapter_table(name, entry, ["native"])


def test_a_changed_chapter_is_stale(tmp_path):
    name = book_claims.chapter_names()[0]
    data = {"chapters": {name: {"digest": "0" * 64}, "99_gone": {"digest": "1" * 64}}}
    stale = book_claims.stale_chapters(data)
    assert set(stale) == {name, "99_gone"}
    assert f"make claims CHAPTERS={name}" in stale[name]


SWEPT = book_claims.load()


@pytest.mark.parametrize("chapter", sorted((SWEPT or {}).get("chapters", {})) or ["-"])
def test_each_swept_chapter_matches_its_code(chapter):
    """book/claims.json's record of a chapter is of the chapter's current code."""
    if SWEPT is None:
        pytest.skip("book/claims.json does not exist: no sweep recorded yet (make claims)")
    if chapter == "-":
        pytest.skip("book/claims.json records no chapter yet")
    stale = book_claims.stale_chapters({"chapters": {chapter: SWEPT["chapters"][chapter]}})
    assert chapter not in stale, stale.get(chapter)


def test_the_digest_ignores_comments_and_wrapping_but_not_code(tmp_path):
    from attncourse.course.claims import code_digest

    def chapter(code: str) -> Path:
        path = tmp_path / f"c{len(list(tmp_path.iterdir()))}.md"
        path.write_text("# Title\n\n```{code-cell} ipython3\n" + code + "\n```\n")
        return path

    plain = code_digest(chapter('x = 1  # one\nprint(f"x is {x} here")'))
    assert code_digest(chapter('x = 1\nprint(f"x is {x} "\n      "here")')) == plain
    assert code_digest(chapter('x = 2  # one\nprint(f"x is {x} here")')) != plain


def _executed(tmp_path, cells):
    """A chapter of ``cells`` (source, seconds, outputs) and its executed notebook as the
    sweep writes it: a setup cell first, nbclient's timestamps on each code cell."""
    import nbformat
    text = "".join(f"```{{code-cell}} ipython3\n{source}\n```\n\n" for source, _, _ in cells)
    path = tmp_path / "chapter.md"
    path.write_text(text)
    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_code_cell("setup"))
    for source, seconds, outputs in cells:
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["execution"] = {"iopub.execute_input": "2026-11-28T10:00:00.000000Z",
                                      "shell.execute_reply": f"2026-11-28T10:{seconds // 60:02d}"
                                                             f":{seconds % 60:02d}.000000Z"}
        cell.outputs = outputs
        notebook.cells.append(cell)
    executed = tmp_path / "chapter.ipynb"
    nbformat.write(notebook, executed)
    return path, executed


def test_slow_cells_are_found_with_whether_they_showed_progress(tmp_path):
    import nbformat
    stream = nbformat.v4.new_output
    widget = stream("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "x"},
        "text/plain": "lm: 40%|####      | 48/120 [00:09<00:14, 5.1step/s]"})
    loaded = stream("stream", name="stdout",
                    text="lm: trained already (120 steps), loaded from its checkpoint\n")
    printed = stream("stream", name="stdout", text="exact match 97.0%\n")
    path, executed = _executed(tmp_path, [("a = 1", 5, [printed]), ("b = 2", 95, [widget]),
                                          ("c = 3", 40, [loaded]), ("d = 4", 31, [printed])])
    assert tool.slow_cells(path, executed) == [
        {"line": 6, "seconds": 95.0, "progress": True},
        {"line": 10, "seconds": 40.0, "progress": True},
        {"line": 14, "seconds": 31.0, "progress": False}]


def test_every_cell_past_30_seconds_showed_progress_in_every_variant():
    """On a slower machine a silent cell looks like a hang."""
    data = book_claims.load()
    silent = [f"{name} line {cell['line']} ({variant}, {cell['seconds']:.0f} s)"
              for name, entry in data["chapters"].items()
              for variant, cells in (entry.get("slow_cells") or {}).items()
              for cell in cells if not cell["progress"]]
    assert not silent, f"cells past 30 s without progress: {silent}"
    assert any(entry.get("slow_cells") for entry in data["chapters"].values())


def test_a_variant_the_machine_runs_as_native_is_named_not_rerun():
    assert tool.same_as_native("1-thread", 1) and not tool.same_as_native("1-thread", 2)
    assert not tool.same_as_native("default-kernels", 1)
    assert not tool.same_as_native("2-threads", 1) and tool.same_as_native("2-threads", 2)


def test_the_page_names_slow_cells_and_those_without_progress():
    entry = {"wall_seconds": {"native": 1, "other-seeds": 2},
             "slow_cells": {"native": [{"line": 5, "seconds": 40, "progress": True}],
                            "other-seeds": [{"line": 5, "seconds": 50, "progress": True},
                                       {"line": 9, "seconds": 31, "progress": False}]}}
    text = book_claims.chapter_table("01_x", entry, ["native", "other-seeds"])
    assert "line 5 (50 s, other-seeds); line 9 (31 s, other-seeds, **no progress**)." in text


#: The variants every chapter is swept under. 1-thread is native on a 2-core machine,
#: where the sweep was run. ``rerun`` runs every cell a second time in the same kernel: a
#: cell that breaks when a learner re-runs it fails the sweep there.
REQUIRED = ("native", "default-kernels", "2-threads", "other-seeds", "rerun")


@pytest.mark.parametrize("chapter", book_claims.chapter_names())
def test_every_chapter_is_swept_in_every_variant_and_every_claim_holds(chapter):
    entry = ((SWEPT or {}).get("chapters") or {}).get(chapter)
    assert entry, f"{chapter} was never swept (`{book_claims.RERUN.format(chapter=chapter)}`)"
    missing = [v for v in REQUIRED if v not in entry["status"]]
    assert not missing, f"{chapter}: not swept under {missing}"
    stopped = {v: s for v, s in entry["status"].items() if s != "ok"}
    assert not stopped, f"{chapter} stopped: {stopped}"
    false = [(claim["line"], variant) for claim in entry["claims"]
             for variant, held in claim["held"].items() if held is False]
    assert not false, f"{chapter}: claims false at (line, variant) {false}"
    # an assert that a variant never reached (under an `if` another seed or CPU does not
    # take, or a row left at an old line) holds nothing there: it must not pass unseen
    unreached = [(claim["line"], variant) for claim in entry["claims"] for variant in REQUIRED
                 if claim.get("held", {}).get(variant) is None]
    assert not unreached, f"{chapter}: claims never reached at (line, variant) {unreached}"
    # one row per assert of the chapter (lines may have moved since, with the prose)
    rows = Counter(claim["expression"] for claim in entry["claims"])
    current = Counter(meta["expression"] for meta in chapter_asserts(chapter))
    assert rows == current, (f"{chapter}: recorded claims that are not the chapter's asserts "
                             f"(duplicated rows) {list((rows - current).items())[:4]}, and "
                             f"asserts without a row {list((current - rows).items())[:4]}")


def _fake_run(out: Path, chapter: str, variant: str, digest: str, claims: list[tuple]) -> None:
    folder = out / variant
    folder.mkdir(parents=True, exist_ok=True)
    run = {"chapter": chapter, "variant": variant, "digest": digest, "wall_seconds": 1.0,
           "status": "ok", "runtime": {}, "env": {}, "finished": "2026-12-07T00:00:00+00:00"}
    (folder / f"{chapter}.run.json").write_text(json.dumps(run))
    (folder / f"{chapter}.jsonl").write_text("".join(json.dumps({
        "chapter": chapter, "variant": variant, "line": line, "expression": expression,
        "kind": "comparison", "count": 1, "held": held, "values": [1, 2], "bound": 2,
        "margin": 1, "relative_margin": 0.5}) + "\n" for line, expression, held in claims))


def test_a_claim_keeps_its_row_when_its_line_moves(tmp_path):
    chapter = book_claims.chapter_names()[0]
    digest = book_claims.code_digest(ROOT / "notebooks" / f"{chapter}.md")
    target = tmp_path / "claims.json"
    first = tmp_path / "first"
    _fake_run(first, chapter, "native", digest, [(10, "a < b", True), (12, "a < b", True),
                                                  (14, "c > d", True)])
    _fake_run(first, chapter, "2-threads", digest, [(10, "a < b", True), (12, "a < b", True),
                                                     (14, "c > d", True)])
    tool.merge(first, target)
    # a paragraph above was reflowed (same digest): the asserts moved down two lines, and
    # only one variant is swept again
    again = tmp_path / "again"
    _fake_run(again, chapter, "native", digest, [(12, "a < b", True), (14, "a < b", False),
                                                  (16, "c > d", True)])
    tool.merge(again, target)
    claims = json.loads(target.read_text())["chapters"][chapter]["claims"]
    assert [(c["line"], c["expression"]) for c in claims] == [
        (12, "a < b"), (14, "a < b"), (16, "c > d")]               # one row each, moved
    assert [c["held"] for c in claims] == [{"native": True, "2-threads": True},
                                           {"native": False, "2-threads": True},
                                           {"native": True, "2-threads": True}]
    # an assert removed from the chapter leaves with the last variant that held it
    _fake_run(again, chapter, "native", digest, [(12, "a < b", True), (16, "c > d", True)])
    _fake_run(again, chapter, "2-threads", digest, [(12, "a < b", True), (16, "c > d", True)])
    tool.merge(again, target)
    claims = json.loads(target.read_text())["chapters"][chapter]["claims"]
    assert [(c["line"], c["expression"]) for c in claims] == [(12, "a < b"), (16, "c > d")]


def test_a_claim_a_variant_never_reached_is_recorded_as_such(tmp_path):
    chapter = book_claims.chapter_names()[0]
    digest = book_claims.code_digest(ROOT / "notebooks" / f"{chapter}.md")
    target = tmp_path / "claims.json"
    _fake_run(tmp_path / "out", chapter, "native", digest, [(10, "a < b", True)])
    _fake_run(tmp_path / "out", chapter, "other-seeds", digest, [(10, "a < b", None)])  # an `if`
    tool.merge(tmp_path / "out", target)
    claim = json.loads(target.read_text())["chapters"][chapter]["claims"][0]
    assert claim["held"] == {"native": True}            # other-seeds absent: the test above fails
