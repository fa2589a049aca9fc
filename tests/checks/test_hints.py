"""The checks' hints escalate from a nudge to the idea, never to the code.

No hint of the checks (the ``*_HINT``, ``*_RULE`` and ``*NUDGE*`` texts of
``attncourse.checks``) may hold a piece of an exercise's solution as code: every call,
operation, index or comparison of the chapters' solution functions, written 12 characters
or longer (spaces and backquotes ignored), is looked for in every hint. And no hint, as
written in the checks' source or as every hidden case carries it, may read as code at all
(:func:`code_like`): the exceptions are listed, each with its reason, in :data:`ALLOWED`.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import attncourse.chapters as chapters
import attncourse.checks as checks
from attncourse.course.exercises import chapter_exercises

ROOT = Path(__file__).resolve().parents[2]
#: Shapes, not code: a hint may say what shape a result has.
SHAPES = {"num_heads*d_v"}


def _squeeze(text: str) -> str:
    return re.sub(r"[\s`]", "", text)


def hints() -> dict[str, str]:
    out = {}
    modules = [importlib.import_module(f"attncourse.checks.{info.name}")
               for info in pkgutil.iter_modules(checks.__path__)]
    for module in modules + chapters.modules("checks"):
        out |= {f"{module.__name__}.{name}": value for name, value in vars(module).items()
                if isinstance(value, str) and re.search(r"HINT|RULE|NUDGE", name)}
    return out


def solution_pieces() -> dict[str, set[str]]:
    pieces = {}
    for chapter in sorted((ROOT / "notebooks").glob("*.md")):
        for ex in chapter_exercises(chapter):
            if ex.kind != "coding":
                continue
            tree = ast.parse(ex.solution_code[0])
            fn = next(node for node in tree.body if getattr(node, "name", None) == ex.function)
            pieces[ex.label] = {_squeeze(ast.unparse(node)) for node in ast.walk(fn)
                                if isinstance(node, (ast.Call, ast.BinOp, ast.Subscript, ast.Compare, ast.BoolOp))
                                and len(_squeeze(ast.unparse(node))) >= 12} - SHAPES
    return pieces


def test_there_are_hints_and_solutions_to_compare():
    assert len(hints()) > 100 and len(solution_pieces()) >= 30


def test_no_hint_gives_a_solutions_code():
    # Parsed once: inside the comprehension every hint re-read every chapter (96 s).
    pieces = {piece for found in solution_pieces().values() for piece in found}
    found = [f"{name}: {piece}" for name, text in hints().items() for piece in pieces
             if piece in _squeeze(text)]
    assert not found, "\n".join(found)


# ------------------------------------------------------------------ no code-like text at all
#
# Besides the pieces of the solutions above, no hint may hold text that reads as code:
# a call with arguments, an index, an operator between two names, a keyword argument or
# code between backquotes. A hint names the idea ("subtract each row's own maximum") and
# the functions the statement allows ("np.exp"), never an expression to paste.

#: What reads as code in a hint.
CODE = {
    "a call with arguments": re.compile(r"[A-Za-z_][\w.]*\((?!\))[^()]*\)"),
    "an index": re.compile(r"[A-Za-z_]\w*\[[^\]]+\]"),
    "an operator between names": re.compile(
        r"(?<![\w.])[A-Za-z_]\w*(?:\s*(?:\*\*|//|==|!=|<=|>=|@|%)\s*|\s[-+*/<>]\s|[+*])[A-Za-z_]\w*"),
    "a keyword argument": re.compile(r"\b[a-z_]\w*=[\w\[(-]"),
}
#: Between backquotes a hint may name a function, method, argument or attribute (``np.exp``,
#: ``.sum()``, ``axis``), nothing longer.
A_NAME = re.compile(r"\.?[A-Za-z_][\w.]*(\(\))?")
#: Code a hint may show, each with its reason: how to call a check or what a stub looks
#: like, never a piece of an exercise's answer.
ALLOWED = {
    "check_causal_early_exit(my_causal_kernel)": "how to call the check, not the kernel's code",
    "{}(my_function)": "how to pass a function to a check (core's not-called message)",
    "{}(my_function(...))": "the mistake that message names: calling the function first",
    "my_function(...)": "the same message: the function called instead of passed",
    "`...`": "the stub a released notebook holds, what the learner replaces",
    "`raise NotImplementedError()`": "the stub of nbgrader's release, what the learner replaces",
    "fn({})": "how to rerun a case in a new cell: the check's own inputs, not the answer",
    "H*W": "a shape, the number of positions of an H x W map, as the statement writes it",
    "num_heads * d_v": "a shape, the width of the heads side by side, as the statement writes it",
}
#: Names of the texts that are hints: module constants and local variables.
HINTY = re.compile(r"HINT|NUDGE|RULE|EXPLAIN|EQUATION|^equation$|^lower$", re.IGNORECASE)


def _text(node: ast.AST) -> str | None:
    """The literal text of a string expression, formatted values as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        return None if left is None and right is None else (left or "{}") + (right or "{}")
    return None


def _strings(node: ast.AST):
    text = _text(node)
    if text is not None:
        yield text
        return
    for child in ast.iter_child_nodes(node):
        yield from _strings(child)


def written_hints() -> dict[str, str]:
    """Every hint text in the checks' source: constants, ``hint=``/``nudge=`` arguments,
    what the functions that diagnose a miss return, and the hints of buggy variants."""
    out = {}
    paths = [*(ROOT / "attncourse" / "checks").glob("*.py"),
             *(ROOT / "attncourse" / "chapters").glob("ch*/*checks.py")]
    for path in sorted(paths):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and HINTY.search(t.id) for t in targets):
                    found += [(node.lineno, s) for s in _strings(node.value)]
            elif isinstance(node, ast.keyword) and node.arg in ("hint", "nudge"):
                found += [(node.value.lineno, s) for s in _strings(node.value)]
            elif isinstance(node, ast.FunctionDef) and re.search("hint|diagnos|variant|recipe", node.name):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Return) and sub.value is not None:
                        found += [(sub.lineno, s) for s in _strings(sub.value)]
                    elif isinstance(sub, ast.Tuple) and sub.elts and _text(sub.elts[0]):
                        found.append((sub.lineno, _text(sub.elts[0])))
        name = path.name if path.parent.name == "checks" else f"{path.parent.name}/{path.name}"
        out |= {f"{name}:{line} {text[:40]!r}": text for line, text in found}
    return out


def case_hints() -> dict[str, str]:
    """The hint and nudge of every hidden case of every check, as the checks build them."""
    out = {}
    shared = [importlib.import_module(f"attncourse.checks.{info.name}")
              for info in pkgutil.iter_modules(checks.__path__)]
    for module in shared + chapters.modules("checks"):
        short = module.__name__.removeprefix("attncourse.").removeprefix("checks.")
        for name, build in vars(module).items():
            if (name.endswith("_cases") and name != "run_cases" and callable(build)
                    and build.__module__ == module.__name__):
                for i, case in enumerate(build()):
                    out |= {f"{short}.{name}[{i}].hint": case.hint,
                            f"{short}.{name}[{i}].nudge": case.nudge}
    return out


def allowed_uses() -> dict[str, str]:
    """What each check's refusal lists as allowed ("Allowed: ..."), shown as its hint."""
    from attncourse.checks.hand_offs import HAND_OFFS

    return {f"HAND_OFFS[{name!r}].uses": rules.uses for name, rules in HAND_OFFS.items()}


def code_like(text: str) -> list[str]:
    """The pieces of ``text`` that read as code and are not in :data:`ALLOWED`."""
    for allowed in ALLOWED:
        text = text.replace(allowed, " ")
    found = [f"{kind}: {m.group(0)}" for kind, pattern in CODE.items() for m in pattern.finditer(text)]
    return found + [f"code between backquotes: `{quoted}`" for quoted in re.findall(r"`([^`]*)`", text)
                    if not A_NAME.fullmatch(quoted)]


def test_the_scan_sees_every_kind_of_hint():
    assert len(written_hints()) > 200 and len(case_hints()) > 200 and len(allowed_uses()) >= 30


@pytest.mark.parametrize("text", [
    "x.repeat_interleave(group, dim=1)", "block_table[t // block_size]", "`q @ k.T`",
    "divide by np.sqrt(d_k)", "keep it with keepdims=True", "scores / tau", "i // group",
    "tokens[j - 1] == tokens[i]", "`return output, weights`",
])
def test_the_scan_finds_code(text):
    assert code_like(f"Hint: {text}, then go on.")


@pytest.mark.parametrize("text", [
    "Subtract each row's own maximum before np.exp.", "Use the `axis` argument, then `.sum()`.",
    "Return an array of shape (tgt_len, src_len).", "Softmax along the last axis (eq. (1)).",
    "Each query head shares its key/value head with the group.",
])
def test_the_scan_passes_prose(text):
    assert not code_like(text)


def test_no_hint_reads_as_code():
    found = [f"{where}: {piece}" for hints_ in (written_hints(), case_hints(), allowed_uses())
             for where, text in hints_.items() for piece in code_like(text)]
    assert not found, f"{len(found)} pieces of code in hints:\n" + "\n".join(found)


def test_every_allowed_exception_is_still_used():
    texts = " ".join({**written_hints(), **case_hints()}.values())
    assert [a for a in ALLOWED if a not in texts] == []
