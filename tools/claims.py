"""Sweep the chapters' claims over variants of the machine: ``make claims``.

Each chapter checks its claims with ``assert`` statements. They pass on the machine that
built the book; this tool measures by how much they would pass elsewhere. It executes
every chapter under each *variant* of the machine and records, for every ``assert``, its
operands, whether it held and its margin to the bound, then merges the records into
``book/claims.json``, which the book's page *How sure are these numbers?*
(``book/claims.md``) shows and ``tests/book/test_claims.py`` keeps fresh.

Variants (:data:`VARIANTS`):

- ``native``: as the book build runs a chapter (one per core, each kernel with its
  share of the threads);
- ``default-kernels``: ``ATEN_CPU_CAPABILITY=default``, torch's non-vectorised CPU
  kernels, which round differently: a stand-in for another CPU (an AVX2 machine's
  results differ bit for bit from an AVX-512 one's);
- ``1-thread`` and ``2-threads``: other thread counts, which change the order of
  reductions (a 2-thread chapter runs alone, so as not to share the 2 cores);
- ``rerun``: every code cell executed a second time, in order, in the same kernel, as
  a learner re-runs cells (a name rebound by a later cell breaks an earlier one); it
  loads the models ``native`` trained;
- ``other-seeds``: every trained model from another seed, on other drawn data
  (``ATTNCOURSE_SEED_OFFSET=1000000``, :func:`attncourse.runtime.seed_offset`: every seed
  ``s`` a recipe trains or draws data with becomes ``s + 1000000``, and seeds outside
  ``[0, 1000000)`` are refused, so no seed of the variant is one ``native`` uses; the
  chapters' own ``torch.manual_seed(n)`` calls are shifted too, below).

Each variant has its own folder under ``--out`` (default ``_build/claims``): its trained
models (``ATTNCOURSE_RUNS=<out>/<variant>/runs``, so that no variant loads another's
model), and per chapter the executed notebook, its log, ``<chapter>.jsonl`` (one line per
assert) and ``<chapter>.run.json`` (wall time, status, digest of the code that ran).

How an assert is recorded: before execution each code cell is parsed (:mod:`ast`) and
every ``assert TEST, MSG`` is rewritten in place, on its own lines so that tracebacks keep
the chapter's line numbers, into ``assert _claims.claim(ID, lambda: ...), MSG``. The
rewritten test evaluates the same operands in the same order (chained comparisons,
``and``/``or`` short-circuits) and returns the same truth, so a false claim still raises
``AssertionError`` and stops the chapter; but first it records, for a comparison
``a < b`` (``<=``, ``>``, ``>=``, chains), the operands and the margin (``b - a`` for
``<``, ``a - b`` for ``>``; the relative margin divides by ``|bound|``, the bound being
the operand that is a number written in the code, else the right-hand one); for ``and``
the smallest margin of its parts, for ``or`` the largest (compared relative to their
bounds, :func:`tightest`); ``allclose(a, b, rtol=0, atol=x)`` (torch or NumPy) records
``max |a - b|`` and ``x``, with the margin ``x - max |a - b|``; anything else
(``allclose`` with a relative tolerance, ``all(...)``, a flag) only its truth. An assert that runs many times
(in a loop) keeps its count and its worst run. ``np.testing.assert_*`` calls are not
``assert`` statements: they check, unrecorded.

Usage (from the repository root)::

    .venv/bin/python tools/claims.py run [--chapters 04_self_attention ...]
                                         [--variants native default-kernels ...]
                                         [--out _build/claims] [--workers 2] [--fresh]
                                         [--missing]   # only runs stale or not finished
    .venv/bin/python tools/claims.py merge [--out _build/claims]   # into book/claims.json
    .venv/bin/python tools/claims.py check [--margin 0.05]        # stale chapters, thin claims
"""

from __future__ import annotations

import argparse
import ast
import copy
import datetime
import json
import math
import numbers
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CLAIMS = ROOT / "book" / "claims.json"
TIMINGS = ROOT / "book" / "chapter_timings.json"
DEFAULT_OUT = ROOT / "_build" / "claims"

#: The thread-count variables that torch's OpenMP, MKL and OpenBLAS read at start-up.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: Variables a variant may set: cleared from the inherited environment of every job, so
#: that ``native`` is native whatever the shell exported.
VARIANT_VARIABLES = ("ATEN_CPU_CAPABILITY", "ATTNCOURSE_SEED_OFFSET", *THREAD_VARIABLES)

#: The ``other-seeds`` variant's offset: every seed the chapters use is below it, so the
#: shifted seeds ``[offset, 2 offset)`` are none of theirs (the runtime refuses any other).
OTHER_SEEDS_OFFSET = 1_000_000

#: name -> environment it sets, thread count (None: the book build's share) and why.
VARIANTS: dict[str, dict[str, Any]] = {
    "native": {"env": {}, "threads": None,
               "about": "as the book build runs a chapter (its share of the cores)"},
    "default-kernels": {"env": {"ATEN_CPU_CAPABILITY": "default"}, "threads": None,
                        "about": "torch's non-vectorised CPU kernels: another CPU's rounding"},
    "1-thread": {"env": {}, "threads": 1, "about": "one thread: another order of sums"},
    "2-threads": {"env": {}, "threads": 2, "about": "two threads: another order of sums"},
    "other-seeds": {"env": {"ATTNCOURSE_SEED_OFFSET": str(OTHER_SEEDS_OFFSET)}, "threads": None,
                    "about": "every model and every drawn data set from seeds disjoint from "
                             "native's"},
    # a learner re-runs cells: every code cell a second time, in order, in the same kernel;
    # the models native trained are loaded, not trained again
    "rerun": {"env": {}, "threads": None, "passes": 2, "runs": "native",
              "about": "every cell run a second time, in order, in the same kernel"},
}


# ---- where the code cells are in the .md file ------------------------------------------

FENCE = re.compile(r"^(`{3,}|~{3,})\{code-cell\}")


def code_cell_lines(path: Path, notebook: Any) -> list[int]:
    """For each code cell of ``notebook`` (jupytext's reading of ``path``), the line of
    ``path`` (1-based) that holds its first source line.

    Raises
    ------
    ValueError
        If the file's ``{code-cell}`` fences and the notebook's code cells disagree.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    fences = [i for i, line in enumerate(lines) if FENCE.match(line)]
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    if len(fences) != len(cells):
        raise ValueError(f"{path.name}: {len(fences)} code-cell fences, {len(cells)} code cells")
    found = []
    for fence, cell in zip(fences, cells):
        source = cell.source.splitlines()
        for start in range(fence + 1, min(fence + 80, len(lines) + 1)):
            if lines[start:start + len(source)] == source:
                found.append(start + 1)
                break
        else:
            raise ValueError(f"{path.name}: the code cell after line {fence + 1} was not found")
    return found


# ---- the rewriter ------------------------------------------------------------------------

#: The name of the recorder in the kernel (set by :data:`SETUP`).
RECORDER = "_claims"
COMPARISONS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
               ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
               ast.NotIn: "not in"}


def _is_number(node: ast.AST) -> bool:
    """Whether ``node`` is a number written in the code (``0.5``, ``-3``, ``1 / 3``)."""
    for part in ast.walk(node):
        if isinstance(part, ast.Constant):
            if isinstance(part.value, bool) or not isinstance(part.value, (int, float)):
                return False
        elif not isinstance(part, (ast.UnaryOp, ast.BinOp, ast.operator, ast.unaryop)):
            return False
    return True


def _bound_sides(operands: list[ast.expr]) -> tuple[str, ...]:
    """For each comparison of a chain, which operand is its bound: ``"left"``,
    ``"right"`` or ``"none"`` (no margin to record).

    A number written in the code is the bound. Two such numbers (``0.4 < 0.7`` in
    ``a < 0.4 < 0.7 < b``) compare nothing measured, and two measured values in a chain
    that has written bounds (``min(x) <= max(x)`` in ``70 <= min(x) <= max(x) <= 130``)
    only order them: neither has a margin. Without any written number (``a < b - 1.5``)
    the right-hand side is the bound.
    """
    numbers_ = [_is_number(operand) for operand in operands]
    sides = []
    for left, right in zip(numbers_, numbers_[1:]):
        if left and right:
            sides.append("none")
        elif left or right:
            sides.append("left" if left else "right")
        else:
            sides.append("none" if any(numbers_) else "right")
    return tuple(sides)


def _thunk(body: ast.expr) -> ast.Lambda:
    return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[],
                                         kw_defaults=[], kwarg=None, defaults=[]), body=body)


def _call(method: str, *args: ast.expr) -> ast.Call:
    func = ast.Attribute(value=ast.Name(id=RECORDER, ctx=ast.Load()), attr=method, ctx=ast.Load())
    return ast.Call(func=func, args=list(args), keywords=[])


def _recorded(node: ast.expr) -> ast.expr:
    """The test ``node``, evaluated through the recorder's helpers (same order, same truth)."""
    if isinstance(node, ast.Compare) and all(type(op) in COMPARISONS for op in node.ops):
        operands = [node.left, *node.comparators]
        ops = tuple(COMPARISONS[type(op)] for op in node.ops)
        return _call("compare", ast.Constant(ops), ast.Constant(_bound_sides(operands)),
                     *(_thunk(operand) for operand in operands))
    if isinstance(node, ast.BoolOp):
        method = "all_of" if isinstance(node.op, ast.And) else "any_of"
        return _call(method, *(_thunk(_recorded(value)) for value in node.values))
    if _is_absolute_close(node):
        keywords = ast.Dict(keys=[ast.Constant(k.arg) for k in node.keywords],
                            values=[_thunk(k.value) for k in node.keywords])
        return _call("close", _thunk(node.func), _thunk(node.args[0]), _thunk(node.args[1]),
                     keywords)
    return _call("term", _thunk(node))


def _is_absolute_close(node: ast.expr) -> bool:
    """``torch.allclose(a, b, rtol=0, atol=x)`` (or ``np.``/``numpy.``): a test of
    ``max |a - b| <= x``, whose margin is ``x - max |a - b|``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "allclose" and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("torch", "np", "numpy") and len(node.args) == 2
            and not any(isinstance(arg, ast.Starred) for arg in node.args)
            and all(k.arg is not None for k in node.keywords)):
        return False
    keywords = {k.arg: k.value for k in node.keywords}
    rtol = keywords.get("rtol")
    return ("atol" in keywords and isinstance(rtol, ast.Constant)
            and not isinstance(rtol.value, bool) and rtol.value == 0
            and set(keywords) <= {"rtol", "atol"})


def _has_margin(node: ast.expr) -> bool:
    """Whether the recorded test holds an ordering (``<``, ``>=``...) or an absolute
    tolerance (``allclose`` with ``rtol=0``): it has a margin."""
    if isinstance(node, ast.BoolOp):
        return any(_has_margin(value) for value in node.values)
    if _is_absolute_close(node):
        return True
    if not isinstance(node, ast.Compare):
        return False
    sides = _bound_sides([node.left, *node.comparators])
    return any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) and side != "none"
               for op, side in zip(node.ops, sides))


def _binds_or_suspends(node: ast.AST) -> bool:
    """Whether a lambda around ``node`` would change it (``:=``, ``await``, ``yield``)."""
    return any(isinstance(part, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom))
               for part in ast.walk(node))


def _offsets(text: str) -> list[int]:
    """Byte offset of each line's start in ``text`` encoded as UTF-8 (ast's columns)."""
    starts, total = [], 0
    for line in text.encode("utf-8").splitlines(keepends=True):
        starts.append(total)
        total += len(line)
    return starts + [total]


def _parse(source: str) -> tuple[str, ast.Module] | None:
    """The cell as Python (IPython's line magics translated, lines kept) and its tree."""
    try:
        return source, ast.parse(source)
    except SyntaxError:
        pass
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        python = TransformerManager().transform_cell(source)
        if python.count("\n") - source.count("\n") in (0, 1):
            return python, ast.parse(python)
    except (ImportError, SyntaxError):
        pass
    return None


def rewrite_source(source: str, first_line: int = 1,
                   recorder: str = RECORDER) -> tuple[str, list[dict[str, Any]]]:
    """Rewrite a code cell's asserts so that each records itself through ``recorder``.

    Parameters
    ----------
    source : str
        The cell's code.
    first_line : int
        The line of the chapter's file that holds the cell's first line: claims are named
        by their line in the file.

    Returns
    -------
    (str, list of dict)
        The new code, with as many lines as ``source`` and every statement where it was,
        and one entry per assert: ``id``, ``line``, ``expression`` (its source) and
        ``kind`` (``"comparison"`` when it has a margin to record, else ``"truth"``).
        Also a cell's own ``torch.manual_seed(n)`` (not one inside a function, whose seed
        its caller gives) becomes ``torch.manual_seed(recorder.seed(n))``, which adds
        ``$ATTNCOURSE_SEED_OFFSET`` (0 unless the ``other-seeds`` variant). A cell
        that does not parse is returned unchanged.
    """
    parsed = _parse(source)
    if parsed is None:
        return source, []
    python, tree = parsed
    starts = _offsets(python)
    data = python.encode("utf-8")
    edits: list[tuple[int, int, str]] = []
    claims: list[dict[str, Any]] = []
    asserts = [node for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    for node in sorted(asserts, key=lambda n: (n.lineno, n.col_offset)):
        line = first_line + node.lineno - 1
        claim_id = f"{line}" + (f".{sum(c['line'] == line for c in claims)}"
                                if any(c["line"] == line for c in claims) else "")
        expression = ast.get_source_segment(python, node.test) or ast.unparse(node.test)
        if _binds_or_suspends(node.test):
            test, kind = _call("plain", ast.Constant(claim_id), node.test), "truth"
        else:
            kind = "comparison" if _has_margin(node.test) else "truth"
            test = _call("claim", ast.Constant(claim_id), _thunk(_recorded(node.test)))
        text = ast.unparse(test)
        if recorder != RECORDER:
            text = text.replace(f"{RECORDER}.", f"{recorder}.")
        # Same number of lines: the newlines go inside the call's parentheses.
        text = text[:-1] + "\n" * (node.end_lineno - node.lineno) + ")"
        message = "" if node.msg is None else ", " + ast.unparse(node.msg)
        begin = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno - 1] + node.end_col_offset
        edits.append((begin, end, f"assert {text}{message}"))
        claims.append({"id": claim_id, "line": line, "expression": " ".join(expression.split()),
                       "kind": kind})
    spans = [(b, e) for b, e, _ in edits]
    # a function's seed comes from its caller (a learner's my_train(seed) is called by its
    # check, which the recorder must not reach into): only the cells' own calls shift
    in_functions = {id(inner) for node in ast.walk(tree)
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                    for inner in ast.walk(node)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and id(node) not in in_functions and len(node.args) == 1 and not node.keywords
                and isinstance(node.func, ast.Attribute) and node.func.attr == "manual_seed"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            arg = node.args[0]
            begin = starts[arg.lineno - 1] + arg.col_offset
            end = starts[arg.end_lineno - 1] + arg.end_col_offset
            if not any(b <= begin < e for b, e in spans):
                old = data[begin:end].decode("utf-8")
                edits.append((begin, end, f"{recorder}.seed({old})"))
    for begin, end, text in sorted(edits, reverse=True):
        data = data[:begin] + text.encode("utf-8") + data[end:]
    return data.decode("utf-8"), claims


# ---- the recorder, inside the chapter's kernel ----------------------------------------

def summarise(value: Any) -> Any:
    """A JSON-safe summary: numbers and flags as they are, arrays as min/max/shape."""
    if value is None or isinstance(value, (bool, str)):
        return value if not isinstance(value, str) else value[:80]
    if isinstance(value, numbers.Integral):
        return int(value) if abs(int(value)) < 2**53 else float(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        try:
            value = value.detach().cpu().double().numpy()
        except (RuntimeError, TypeError):
            return repr(value)[:80]
    if type(value).__module__ == "numpy":
        import numpy as np

        array = np.asarray(value)
        if array.ndim == 0:
            return summarise(array.item())
        if array.dtype.kind in "biuf" and array.size:
            return {"min": summarise(array.min().item()), "max": summarise(array.max().item()),
                    "shape": list(array.shape)}
        return {"shape": list(array.shape), "dtype": str(array.dtype)}
    if isinstance(value, (list, tuple)) and len(value) <= 8:
        return [summarise(item) for item in value]
    return repr(value)[:80]


def _floats(value: Any) -> Any:
    import numpy as np

    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().double().numpy()
    return np.asarray(value, dtype=float)


def margin_of(op: str, left: Any, right: Any, side: str) -> dict[str, Any] | None:
    """The margin of ``left op right`` (its smallest element for arrays), its bound and
    the margin relative to the bound; None for an operator without a margin."""
    if op not in ("<", "<=", ">", ">=") or side == "none":
        return None
    try:
        import numpy as np

        a, b = _floats(left), _floats(right)
        margin = float(np.min(b - a if op in ("<", "<=") else a - b))
    except Exception:  # noqa: BLE001  (operands that are not numbers: no margin)
        return None
    if not math.isfinite(margin):
        return None
    bound = right if side == "right" else left
    scalar = summarise(bound)
    relative = None
    if isinstance(scalar, (int, float)) and not isinstance(scalar, bool) and scalar != 0:
        relative = margin / abs(scalar)
    return {"margin": margin, "bound": scalar, "relative_margin": relative}


def tightest(margins: list[dict[str, Any]], pick: Any) -> dict[str, Any] | None:
    """The binding one of several margins (``pick``: min for ``and``, max for ``or``).

    Margins of different quantities (a loss in nats, an error near 1e-12) compare by
    their size relative to their bounds; by their absolute size only where a bound is 0.
    """
    if not margins:
        return None
    if all(m["relative_margin"] is not None for m in margins):
        return pick(margins, key=lambda m: m["relative_margin"])
    return pick(margins, key=lambda m: m["margin"])


class Recorder:
    """Records the chapter's claims as they run; written to ``path`` after every cell."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.claims: dict[str, dict[str, Any]] = {}
        self.frames: list[dict[str, Any]] = []
        self.last_failed: str | None = None

    # -- the helpers the rewritten asserts call
    def claim(self, claim_id: str, test: Any) -> bool:
        """Evaluate the rewritten test, record the run, return its truth."""
        frame = {"values": [], "last": None}
        self.frames.append(frame)
        try:
            value = test()
        finally:
            self.frames.pop()
        held = bool(value)  # raises as `assert value` would (an array's truth, say)
        self._add(claim_id, held, frame["values"], frame["last"])
        return held

    def plain(self, claim_id: str, value: Any) -> bool:
        """A test that a lambda would change (``:=``): already evaluated, truth only."""
        held = bool(value)
        self._add(claim_id, held, [held], None)
        return held

    def compare(self, ops: tuple[str, ...], sides: tuple[str, ...], *operands: Any) -> Any:
        """``a op0 b op1 c ...`` as Python evaluates it, recording operands and margins."""
        frame = self.frames[-1]
        left = operands[0]()
        frame["values"].append(summarise(left))
        margins, result = [], True
        for index, op in enumerate(ops):
            right = operands[index + 1]()
            frame["values"].append(summarise(right))
            result = _OPERATORS[op](left, right)
            found = margin_of(op, left, right, sides[index])
            if found is not None:
                margins.append(found)
            if index < len(ops) - 1 and not result:
                break
            left = right
        frame["last"] = tightest(margins, min)
        return result

    def close(self, func: Any, left: Any, right: Any, keywords: dict[str, Any]) -> Any:
        """``allclose(a, b, rtol=0, atol=x)`` as Python evaluates it (the function, then
        its arguments, each once), recording ``max |a - b|`` and ``x`` and the margin
        between them."""
        frame = self.frames[-1]
        function, a, b = func(), left(), right()
        options = {name: value() for name, value in keywords.items()}
        result = function(a, b, **options)
        atol = options["atol"]
        frame["last"] = None
        try:
            import numpy as np

            largest = float(np.max(np.abs(_floats(a) - _floats(b))))
        except Exception:  # noqa: BLE001  (operands that are not numbers: truth only)
            frame["values"].append(bool(result))
            return result
        frame["values"] += [summarise(largest), summarise(atol)]
        if math.isfinite(largest):
            margin = float(atol) - largest
            frame["last"] = {"margin": margin, "bound": summarise(atol),
                             "relative_margin": margin / float(atol) if atol else None}
        return result

    def all_of(self, *parts: Any) -> Any:
        """``p and q and ...``: the smallest margin of the parts evaluated."""
        return self._boolean(parts, stop_on=False, pick=min)

    def any_of(self, *parts: Any) -> Any:
        """``p or q or ...``: the largest margin of the parts evaluated."""
        return self._boolean(parts, stop_on=True, pick=max)

    def _boolean(self, parts: tuple[Any, ...], stop_on: bool, pick: Any) -> Any:
        """Evaluate ``parts`` as Python's ``and`` (stops at the first false) or ``or``
        (at the first true) does, and keep the margin ``pick`` chooses among theirs."""
        frame, margins, result = self.frames[-1], [], not stop_on
        for index, part in enumerate(parts):
            frame["last"] = None
            result = part()
            last = frame["last"]
            if last is not None:
                margins.append(last)
            if index < len(parts) - 1 and bool(result) == stop_on:
                if last is None:  # decided by a flag: the others' margins say nothing
                    margins = []
                break
        frame["last"] = tightest(margins, pick)
        return result

    def term(self, part: Any) -> Any:
        """Anything else: record its truth."""
        value = part()
        try:
            truth: Any = bool(value)
        except Exception:  # noqa: BLE001  (the assert raises it itself)
            truth = summarise(value)
        self.frames[-1]["values"].append(truth)
        self.frames[-1]["last"] = None
        return value

    @staticmethod
    def seed(value: int) -> int:
        """A chapter's own ``torch.manual_seed(value)``, shifted by the variant's offset."""
        from attncourse.runtime import training_seed

        return training_seed(value)

    # -- bookkeeping
    def _add(self, claim_id: str, held: bool, values: list, last: dict | None) -> None:
        run = {"held": held, "values": values, "margin": None, "bound": None,
               "relative_margin": None, **(last or {})}
        entry = self.claims.setdefault(claim_id, {"count": 0, "held": True, "worst": None})
        entry["count"] += 1
        entry["held"] = entry["held"] and held
        if not held:
            self.last_failed = claim_id
        worst = entry["worst"]
        if worst is None or (worst["held"] and not held):
            entry["worst"] = run
        elif worst["held"] == held and run["margin"] is not None and (
                worst["margin"] is None or tightest([worst, run], min) is run):
            entry["worst"] = run

    def runtime(self) -> dict[str, Any]:
        """What the kernel ran with: torch's version, kernel family and threads."""
        torch = sys.modules.get("torch")
        if torch is None:
            return {}
        info: dict[str, Any] = {"torch": torch.__version__, "threads": torch.get_num_threads()}
        try:
            info["capability"] = torch.backends.cpu.get_cpu_capability()
        except Exception:  # noqa: BLE001  (older torch)
            pass
        return info

    def flush(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"runtime": self.runtime(), "claims": self.claims,
                                         "last_failed": self.last_failed}))
        temporary.replace(self.path)

    def flush_after_cell(self, result: Any = None) -> None:
        self.flush()


def _operators() -> dict[str, Any]:
    import operator

    return {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
            "==": operator.eq, "!=": operator.ne, "is": operator.is_,
            "is not": operator.is_not, "in": lambda a, b: a in b,
            "not in": lambda a, b: a not in b}


_OPERATORS = _operators()

#: The first cell of every swept chapter: loads this file as a module and the recorder.
SETUP = """\
import importlib.util as _claims_util
import sys as _claims_sys
_claims_spec = _claims_util.spec_from_file_location("_attncourse_claims", {tool!r})
_claims_module = _claims_util.module_from_spec(_claims_spec)
_claims_sys.modules[_claims_spec.name] = _claims_module
_claims_spec.loader.exec_module(_claims_module)
_claims = _claims_module.Recorder({raw!r})
get_ipython().events.register("post_run_cell", _claims.flush_after_cell)
del _claims_util, _claims_sys, _claims_spec, _claims_module
"""


# ---- one chapter in one variant (a process of its own, started by `run`) ----------------

def execute_chapter(path: Path, variant: str, folder: Path, cell_timeout: int = -1) -> dict:
    """Execute the chapter at ``path`` with its asserts recording, in this environment.

    Writes ``<chapter>.ipynb``, ``<chapter>.jsonl`` and ``<chapter>.run.json`` into
    ``folder``; returns the last one's content.
    """
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    sys.path.insert(0, str(ROOT))
    from attncourse.course.claims import code_digest

    chapter = path.stem
    notebook = jupytext.read(path)
    digest = code_digest(path)
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    metas: list[dict[str, Any]] = []
    cell_line = {}
    for cell, line in zip(cells, code_cell_lines(path, notebook)):
        cell.source, found = rewrite_source(cell.source, line)
        cell_line[id(cell)] = line
        metas += found
    raw = folder / f"{chapter}.raw.json"
    for stale in (raw, folder / f"{chapter}.jsonl", folder / f"{chapter}.run.json"):
        stale.unlink(missing_ok=True)
    setup = nbformat.v4.new_code_cell(SETUP.format(tool=str(Path(__file__).resolve()),
                                                   raw=str(raw)))
    notebook.cells.insert(0, setup)
    if VARIANTS.get(variant, {}).get("passes", 1) == 2:
        again = [nbformat.v4.new_code_cell(cell.source, metadata=copy.deepcopy(cell.metadata))
                 for cell in cells]
        cell_line.update({id(second): cell_line[id(first)] for first, second in zip(cells, again)})
        notebook.cells += again
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    work = folder / "work" / chapter
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    client = NotebookClient(notebook, timeout=None if cell_timeout <= 0 else cell_timeout,
                            kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(work)}})
    start = time.perf_counter()
    status = "ok"
    try:
        client.execute()
    except Exception as err:  # noqa: BLE001  (a failing chapter is a result, not a crash)
        failed = next((cell for cell in notebook.cells if cell.cell_type == "code"
                       and any(o.get("output_type") == "error" for o in cell.get("outputs", []))),
                      None)
        name = getattr(err, "ename", type(err).__name__)
        value = " ".join(str(getattr(err, "evalue", "")).split())[:200]
        where = f" in the cell at line {cell_line[id(failed)]}" if id(failed) in cell_line else ""
        status = f"{name}{': ' + value if value else ''}{where}"
    seconds = time.perf_counter() - start
    nbformat.write(notebook, folder / f"{chapter}.ipynb")
    recorded = json.loads(raw.read_text()) if raw.exists() else {"runtime": {}, "claims": {}}
    failed_claim = next((m for m in metas if m["id"] == recorded.get("last_failed")), None)
    if status.startswith("AssertionError") and failed_claim is not None:
        status += f": the claim at line {failed_claim['line']}, {failed_claim['expression']}"
    with open(folder / f"{chapter}.jsonl", "w", encoding="utf-8") as out:
        for meta in metas:
            entry = recorded["claims"].get(meta["id"])
            worst = (entry or {}).get("worst") or {}
            out.write(json.dumps({
                "chapter": chapter, "variant": variant, "line": meta["line"],
                "expression": meta["expression"], "kind": meta["kind"],
                "count": (entry or {}).get("count", 0),
                "held": None if entry is None else entry["held"],
                "values": worst.get("values"), "bound": worst.get("bound"),
                "margin": worst.get("margin"),
                "relative_margin": worst.get("relative_margin")}) + "\n")
    env = {name: os.environ[name] for name in
           (*VARIANT_VARIABLES, "ATTNCOURSE_RUNS") if name in os.environ}
    run = {"chapter": chapter, "variant": variant, "digest": digest,
           "wall_seconds": round(seconds, 1), "status": status,
           "asserts": len(metas), "recorded": len(recorded["claims"]),
           "runtime": recorded.get("runtime", {}), "env": env,
           "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    (folder / f"{chapter}.run.json").write_text(json.dumps(run, indent=1) + "\n")
    return run


# ---- the sweep -------------------------------------------------------------------------

def chapter_paths(names: list[str] | None) -> list[Path]:
    """The chapters named (stems, prefixes such as ``04`` or paths), default all."""
    every = sorted(NOTEBOOKS.glob("*.md"))
    if not names:
        return every
    found = []
    for name in names:
        stem = Path(name).stem
        matches = [p for p in every if p.stem == stem] or [p for p in every
                                                             if p.stem.startswith(stem + "_")]
        if len(matches) != 1:
            raise SystemExit(f"claims: no single chapter named {name!r} in notebooks/")
        found += [m for m in matches if m not in found]
    return found


def variant_environment(variant: str, out: Path, threads: int) -> dict[str, str]:
    """The environment of one job: the variant's, its threads, its runs folder."""
    spec = VARIANTS[variant]
    env = {k: v for k, v in os.environ.items() if k not in VARIANT_VARIABLES}
    env.update(spec["env"])
    env.update({name: str(threads) for name in THREAD_VARIABLES})
    env["ATTNCOURSE_RUNS"] = str(out / spec.get("runs", variant) / "runs")
    env["TQDM_DISABLE"] = "1"
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def book_share(cores: int | None = None) -> int:
    """The threads a chapter gets in the book build (book/_ext/execute_chapters.py): every
    chapter at once, one per core, each with cores // processes threads."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // max(1, min(cores, len(list(NOTEBOOKS.glob("*.md"))))))


def same_as_native(variant: str, share: int) -> bool:
    """Whether ``variant`` changes nothing here: no environment, the build's thread count."""
    spec = VARIANTS[variant]
    return not spec["env"] and spec["threads"] in (None, share) and spec.get("passes", 1) == 1


def is_current(folder: Path, chapter: Path) -> bool:
    """Whether ``folder`` (a variant's) holds a finished run of ``chapter``'s current code,
    or ``book/claims.json`` records one."""
    sys.path.insert(0, str(ROOT))
    from attncourse.course.claims import code_digest, load

    digest = code_digest(chapter)
    try:
        run = json.loads((folder / f"{chapter.stem}.run.json").read_text())
        if run.get("status") == "ok" and run.get("digest") == digest:
            return True
    except (OSError, ValueError):
        pass
    entry = ((load(CLAIMS) or {}).get("chapters") or {}).get(chapter.stem) or {}
    return entry.get("digest") == digest and entry.get("status", {}).get(folder.name) == "ok"


def run_sweep(chapters: list[Path], variants: list[str], out: Path, workers: int,
              fresh: bool = False, cell_timeout: int = -1, missing: bool = False) -> int:
    """Every chapter under every variant, at most ``workers`` at a time, one per core;
    with ``missing``, only those without a finished run of their current code."""
    cores = os.cpu_count() or 1
    workers = max(1, min(workers, cores))
    share = book_share(cores)  # whatever --workers says
    seconds = json.loads(TIMINGS.read_text())["seconds"] if TIMINGS.exists() else {}
    jobs = []
    for variant in variants:
        if variant != "native" and same_as_native(variant, share):
            print(f"claims: {variant} is native on this machine (each chapter already runs on "
                  f"{share} thread of {cores} cores); not run twice", flush=True)
            continue
        folder = out / variant
        if fresh:
            shutil.rmtree(folder / "runs", ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        threads = VARIANTS[variant]["threads"] or share
        jobs += [(chapter, variant, threads) for chapter in chapters
                 if not (missing and is_current(folder, chapter))]
    # Longest first; jobs of more threads in a phase of their own, fewer at a time.
    jobs.sort(key=lambda job: (job[2], -seconds.get(job[0].stem, 300)))
    total, done, failures = len(jobs), [0], []
    lock = threading.Lock()
    started = time.perf_counter()
    print(f"claims: {len(chapters)} chapter(s) x {len(variants)} variant(s) = {total} runs, "
          f"at most {workers} at a time, into {out}", flush=True)

    def one(job: tuple[Path, str, int]) -> None:
        chapter, variant, threads = job
        folder = out / variant
        with lock:
            print(f"  start  {variant:<15} {chapter.stem} ({threads} thread"
                  f"{'s' if threads > 1 else ''})", flush=True)
        command = [sys.executable, str(Path(__file__).resolve()), "_chapter", str(chapter),
                   variant, str(folder), "--cell-timeout", str(cell_timeout)]
        with open(folder / f"{chapter.stem}.log", "w") as log:
            code = subprocess.call(command, env=variant_environment(variant, out, threads),
                                   stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        result = folder / f"{chapter.stem}.run.json"
        with lock:
            done[0] += 1
            if code != 0 or not result.exists():
                failures.append(f"{variant} {chapter.stem}")
                print(f"[{done[0]}/{total}] {variant:<15} {chapter.stem}: the run crashed "
                      f"(exit {code}); see {folder / (chapter.stem + '.log')}", flush=True)
                return
            print(f"[{done[0]}/{total}] {variant:<15} {summary_line(folder, chapter.stem)}",
                  flush=True)

    for threads in sorted({job[2] for job in jobs}):
        phase = [job for job in jobs if job[2] == threads]
        pool = max(1, min(workers, cores // threads, len(phase)))
        queue = list(phase)

        def worker() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    job = queue.pop(0)
                one(job)

        threads_ = [threading.Thread(target=worker) for _ in range(pool)]
        for thread in threads_:
            thread.start()
        for thread in threads_:
            thread.join()
    wall = time.perf_counter() - started
    print(f"claims: sweep of {total} runs took {wall:.0f} s ({wall / 60:.1f} min) of wall time",
          flush=True)
    if failures:
        print(f"claims: {len(failures)} run(s) crashed: {', '.join(failures)}", flush=True)
    return 1 if failures else 0


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def summary_line(folder: Path, chapter: str) -> str:
    """One line on a finished run: claims recorded and held, thinnest margin, time."""
    run = json.loads((folder / f"{chapter}.run.json").read_text())
    records = read_jsonl(folder / f"{chapter}.jsonl")
    reached = [r for r in records if r["held"] is not None]
    held = sum(bool(r["held"]) for r in reached)
    relative = [r for r in reached if r.get("relative_margin") is not None]
    thinnest = min(relative, key=lambda r: r["relative_margin"], default=None)
    thin = ("" if thinnest is None else
            f"; thinnest margin {thinnest['relative_margin']:.1%} (line {thinnest['line']})")
    status = "" if run["status"] == "ok" else f"; STOPPED: {run['status']}"
    return (f"{chapter}: {len(reached)}/{len(records)} asserts recorded, {held} held"
            f"{thin}; {run['wall_seconds']:.0f} s{status}")


# ---- cells that keep the reader waiting --------------------------------------------------

#: A cell running longer than this must show progress (on a machine three times
#: slower, a silent minute looks like a hang).
SLOW_CELL_SECONDS = 30.0
#: What a progress bar (tqdm's text, or its widget's text/plain) or a run loaded from its
#: checkpoint (:func:`attncourse.train.loop.run_epochs`) leaves in a cell's outputs.
PROGRESS = re.compile(r"\d+%\||\d+/\d+ \[|loaded from its checkpoint")


def slow_cells(path: Path, executed: Path, seconds: float = SLOW_CELL_SECONDS) -> list[dict]:
    """The code cells of ``executed`` (a sweep's notebook of the chapter at ``path``) that
    ran longer than ``seconds``: their line in ``path``, seconds (nbclient's timestamps)
    and whether they showed progress."""
    import jupytext
    import nbformat

    lines = code_cell_lines(path, jupytext.read(path))
    notebook = nbformat.read(executed, as_version=4)
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"][1:]  # no setup
    found = []
    for cell, line in zip(cells, lines):
        timing = cell.get("metadata", {}).get("execution", {})
        try:
            took = (datetime.datetime.fromisoformat(timing["shell.execute_reply"])
                    - datetime.datetime.fromisoformat(timing["iopub.execute_input"]))
        except (KeyError, ValueError):
            continue
        if took.total_seconds() <= seconds:
            continue
        texts = [output.get("text", "") if output.get("output_type") == "stream"
                 else "".join(output.get("data", {}).get("text/plain", ""))
                 for output in cell.get("outputs", [])]
        found.append({"line": line, "seconds": round(took.total_seconds(), 1),
                      "progress": any(PROGRESS.search(text) for text in texts)})
    return found


# ---- merge and check ---------------------------------------------------------------------

PER_VARIANT = ("values", "held", "margin", "relative_margin", "bound", "count")


def machine() -> str:
    """The CPU's model name and core count, as /proc/cpuinfo says."""
    model = "an unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def dump(data: dict[str, Any]) -> str:
    """``book/claims.json``'s text: one line per claim, so that a diff shows what moved."""
    def text(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    parts = [f" {text(key)}: {text(data[key])}" for key in ("generated", "machine")]
    variants = ",\n".join(f"  {text(k)}: {text(v)}" for k, v in data["variants"].items())
    parts.append(' "variants": {\n' + variants + "\n }")
    chapters = []
    for name, entry in data["chapters"].items():
        fields = []
        for key, value in entry.items():
            if key == "claims":
                claims = ",\n".join(f"    {text(claim)}" for claim in value)
                fields.append('   "claims": [\n' + claims + "\n   ]")
            else:
                fields.append(f"   {text(key)}: {text(value)}")
        chapters.append(f"  {text(name)}: {{\n" + ",\n".join(fields) + "\n  }")
    parts.append(' "chapters": {\n' + ",\n".join(chapters) + "\n }")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def claim_identities(rows: list[dict[str, Any]]) -> list[tuple[tuple[str, int], dict[str, Any]]]:
    """Each claim's identity, ``(expression, k)``: the k-th assert of that expression in the
    chapter, in line order.

    A claim keeps its identity when the lines above it move (a reflowed paragraph does not
    change the chapter's digest), so that a partial sweep after a reflow updates the same
    row instead of adding a second one at the new line.
    """
    seen: dict[str, int] = {}
    identities = []
    for row in sorted(rows, key=lambda r: (r["line"], r["expression"])):
        k = seen.get(row["expression"], 0)
        seen[row["expression"]] = k + 1
        identities.append(((row["expression"], k), row))
    return identities


def merge(out: Path, target: Path = CLAIMS) -> int:
    """Merge every fresh run under ``out`` into ``target``; stale runs are skipped."""
    sys.path.insert(0, str(ROOT))
    from attncourse.course.claims import code_digest, load

    data = load(target) or {}
    data.setdefault("chapters", {})
    # a variant the tool no longer defines (a renamed one) leaves the record whole
    merged_variants = {v: spec for v, spec in (data.get("variants") or {}).items()
                       if v in VARIANTS}
    for entry in data["chapters"].values():
        for key in ("wall_seconds", "status", "runtime", "swept", "slow_cells"):
            entry[key] = {v: x for v, x in entry.get(key, {}).items() if v in VARIANTS}
        for claim in entry.get("claims", []):
            for key in PER_VARIANT:
                claim[key] = {v: x for v, x in claim.get(key, {}).items() if v in VARIANTS}
    digests: dict[str, str | None] = {}
    count = 0
    for run_file in sorted(out.glob("*/*.run.json")):
        run = json.loads(run_file.read_text())
        chapter, variant = run["chapter"], run["variant"]
        if chapter not in digests:
            path = NOTEBOOKS / f"{chapter}.md"
            digests[chapter] = code_digest(path) if path.exists() else None
        if run["digest"] != digests[chapter]:
            print(f"claims: skipped {variant} {chapter}: its code changed since that run")
            continue
        entry = data["chapters"].get(chapter)
        if not isinstance(entry, dict) or entry.get("digest") != run["digest"]:
            entry = {"digest": run["digest"], "claims": [], "wall_seconds": {}, "status": {},
                     "runtime": {}, "swept": {}, "slow_cells": {}}
        claims = dict(claim_identities(entry["claims"]))
        for claim in claims.values():
            for key in PER_VARIANT:
                claim.setdefault(key, {}).pop(variant, None)
        records = claim_identities(read_jsonl(run_file.with_name(f"{chapter}.jsonl")))
        for identity, record in records:
            claim = claims.setdefault(identity, {
                "line": record["line"], "expression": record["expression"],
                "kind": record["kind"], **{key: {} for key in PER_VARIANT}})
            claim["line"], claim["kind"] = record["line"], record["kind"]   # where it is now
            if record["held"] is not None:
                for key in PER_VARIANT:
                    claim[key][variant] = record[key]
        # a row this run does not know and no variant holds any more is an assert that left
        # the chapter (or the old line of a moved one): it goes
        known = {identity for identity, _ in records}
        claims = {identity: claim for identity, claim in claims.items()
                  if identity in known or claim.get("held")}
        entry["claims"] = sorted(claims.values(), key=lambda c: (c["line"], c["expression"]))
        entry["wall_seconds"][variant] = run["wall_seconds"]
        entry["status"][variant] = run["status"]
        entry["runtime"][variant] = run["runtime"]
        entry["swept"][variant] = run["finished"]
        executed = run_file.with_name(f"{chapter}.ipynb")
        if executed.exists() and VARIANTS.get(variant, {}).get("passes", 1) == 1:
            entry.setdefault("slow_cells", {})[variant] = slow_cells(
                NOTEBOOKS / f"{chapter}.md", executed)
        data["chapters"][chapter] = entry
        spec = VARIANTS.get(variant, {})
        env = {k: v for k, v in run["env"].items() if k != "ATTNCOURSE_RUNS"}
        merged_variants[variant] = {"env": env, "about": spec.get("about", "")}
        count += 1
    for variant in VARIANTS:  # a variant this machine runs as native is named, not rerun
        if variant not in merged_variants and "native" in merged_variants and same_as_native(
                variant, book_share()):
            merged_variants[variant] = {"env": merged_variants["native"]["env"],
                                        "about": VARIANTS[variant]["about"],
                                        "same_as": "native"}
    order = [v for v in VARIANTS if v in merged_variants]

    def ordered(by_variant: dict) -> dict:
        return {v: by_variant[v] for v in order if v in by_variant}

    for entry in data["chapters"].values():
        for key in ("wall_seconds", "status", "runtime", "swept", "slow_cells"):
            entry[key] = ordered(entry.get(key, {}))
        for claim in entry["claims"]:
            for key in PER_VARIANT:
                claim[key] = ordered(claim.get(key, {}))
    data["variants"] = ordered(merged_variants)
    data["chapters"] = dict(sorted(data["chapters"].items()))
    data["generated"] = datetime.date.today().isoformat()
    data["machine"] = machine()
    target.write_text(dump(data), encoding="utf-8")
    print(f"claims: merged {count} run(s) into {target}")
    return 0


def check(target: Path = CLAIMS, margin: float = 0.05) -> int:
    """Stale or missing chapters, and claims that failed or hold by less than ``margin``."""
    sys.path.insert(0, str(ROOT))
    from attncourse.course.claims import RERUN, chapter_names, load, stale_chapters

    data = load(target)
    if data is None:
        print(f"claims: {target} does not exist; run `make claims`")
        return 1
    stale = stale_chapters(data)
    for reason in stale.values():
        print(f"stale:   {reason}")
    for name in chapter_names():
        if name not in data.get("chapters", {}):
            print(f"missing: {name} (run `{RERUN.format(chapter=name)}`)")
    for name, entry in data.get("chapters", {}).items():
        for claim in entry.get("claims", []):
            for variant, held in claim.get("held", {}).items():
                relative = claim.get("relative_margin", {}).get(variant)
                if held is False:
                    print(f"failed:  {name} line {claim['line']} in {variant}: "
                          f"{claim['expression']}")
                elif relative is not None and relative < margin:
                    print(f"thin:    {name} line {claim['line']} in {variant}: margin "
                          f"{relative:.1%} of the bound: {claim['expression']}")
        for variant, cells in entry.get("slow_cells", {}).items():
            for cell in cells:
                if not cell["progress"]:
                    print(f"silent:  {name} line {cell['line']} in {variant}: "
                          f"{cell['seconds']:.0f} s without progress")
    return 1 if stale else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/claims.py", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="execute chapters under variants, recording asserts")
    run.add_argument("--chapters", nargs="+", help="names or number prefixes (default: all)")
    run.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    run.add_argument("--out", type=Path, default=DEFAULT_OUT, help="default: %(default)s")
    run.add_argument("--workers", type=int, default=2, help="chapters at a time (default 2)")
    run.add_argument("--fresh", action="store_true",
                     help="empty each variant's trained models first")
    run.add_argument("--cell-timeout", type=int, default=-1, help="seconds; -1: none")
    run.add_argument("--missing", action="store_true",
                     help="only runs that are not finished on the chapter's current code")
    merge_ = commands.add_parser("merge", help="merge the runs under --out into book/claims.json")
    merge_.add_argument("--out", type=Path, default=DEFAULT_OUT)
    merge_.add_argument("--into", type=Path, default=CLAIMS)
    check_ = commands.add_parser("check", help="stale chapters, failed and thin claims")
    check_.add_argument("--file", type=Path, default=CLAIMS)
    check_.add_argument("--margin", type=float, default=0.05,
                        help="report relative margins below this (default 0.05)")
    one = commands.add_parser("_chapter")  # one job, in the variant's environment
    one.add_argument("path", type=Path)
    one.add_argument("variant")
    one.add_argument("folder", type=Path)
    one.add_argument("--cell-timeout", type=int, default=-1)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_sweep(chapter_paths(args.chapters), args.variants, args.out.resolve(),
                         args.workers, args.fresh, args.cell_timeout, args.missing)
    if args.command == "merge":
        return merge(args.out.resolve(), args.into)
    if args.command == "check":
        return check(args.file, args.margin)
    execute_chapter(args.path.resolve(), args.variant, args.folder.resolve(), args.cell_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
