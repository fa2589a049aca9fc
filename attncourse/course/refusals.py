"""What an extracted answer may not be: the grade of record's static analysis.

Before an answer runs (:mod:`attncourse.course.record`), its syntax tree is read with
every name resolved through the imports and plain assignments it holds (``F`` is
``torch.nn.functional``, ``sm = torch.softmax`` makes ``sm`` one too). :func:`refusal`
names the first thing found that an answer has no business with:

- the interpreter's own machinery: ``sys``, ``gc``, ``inspect``, ``ctypes``, ``importlib``,
  ``threading``, ``concurrent``, ``builtins``, ``os``, ``types`` and their kin, reached by
  import or as an attribute (``torch.sys``), ``exec``, ``eval``, ``compile``,
  ``__import__``, ``globals``, ``vars``, ``open``; frame, code and traceback attributes
  (``f_back``, ``_getframe``, ``tb_frame``); any ``__dunder__`` name, attribute, string or
  method (how a lazy object hides its work until converted); any private ``_name``
  attribute (``torch._softmax``, ``torch._VF``);
- assigning to a module's attribute (``np.isclose = ...``);
- ``getattr``, ``operator.attrgetter`` and ``operator.methodcaller`` unless their names are
  constant strings, which are then read as attributes (``getattr(F, 'soft' + 'max')`` is
  ``F.softmax``);
- the exercise's hand-offs (:data:`attncourse.checks.hand_offs.HAND_OFFS`, plus
  :data:`EXTRA` here): a library function named there, by any path
  (``torch.special.log_softmax``, ``x.softmax``, ``functools.partial(torch.softmax)``), and
  any function of the course package but those the exercise allows;
- for a Triton kernel, anything in the answer that is not Triton's (torch or NumPy
  computing the output under the interpreter, in the kernel or in a helper it calls).

The checks' runtime guard still runs in the grading process
(:func:`attncourse.checks.guard.watching`); this analysis is what the answer cannot
switch off, since it happens before the answer exists as code.
"""

from __future__ import annotations

import ast
import re

from attncourse.checks.hand_offs import HAND_OFFS

#: Modules (and attribute names) that reach the interpreter, the process or other threads:
#: refused anywhere in a path (``torch.sys``) and as any attribute.
MODULES = frozenset({
    "sys", "gc", "inspect", "ctypes", "ctypeslib", "importlib", "threading", "concurrent", "builtins",
    "os", "posix", "types", "multiprocessing", "subprocess", "signal", "asyncio", "traceback",
    "weakref", "pickle", "marshal", "copyreg", "shutil", "pathlib", "tempfile", "socket", "runpy",
    "codeop", "pdb", "bdb", "tracemalloc", "faulthandler", "atexit", "sysconfig", "linecache",
    "pkgutil", "zipimport",
})
#: torch's ways around the profiler or the process: its own threads, processes, compilers,
#: operator registry, file loaders.
TORCH_MODULES = frozenset({
    "autograd", "jit", "multiprocessing", "futures", "utils", "library", "ops", "fx", "compile",
    "overrides", "hub", "package", "distributed", "testing", "export", "cpp_extension",
})
#: Attributes no answer needs, that run code from a string or a file, or reach the front end.
ATTRIBUTES = frozenset({
    "eval", "exec", "evaluate", "query", "compile", "system", "popen", "loads", "fromfile", "tofile",
    "memmap", "loadtxt", "genfromtxt", "get_ipython", "load_inline", "setprofile", "settrace",
    "getprofile", "modules",
})
#: Functions of NumPy's and torch's that read or write files (a pickle runs code when loaded).
FILES = frozenset({"load", "save", "savez", "savez_compressed", "savetxt", "from_file", "DataSource"})
#: The only modules an answer may import (then refined by the rules below).
IMPORTABLE = frozenset({
    "numpy", "torch", "math", "cmath", "scipy", "triton", "functools", "itertools", "collections",
    "operator", "numbers", "fractions", "decimal", "statistics", "random", "dataclasses", "typing",
    "string", "re", "einops", "attncourse", "bisect", "heapq", "copy", "enum", "abc", "warnings",
    "tqdm",  # a training answer's progress bar (chapter 7b); tqdm.contrib.concurrent is refused
})
#: Built-in names an answer may not read.
BUILTINS = frozenset({
    "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "open", "breakpoint",
    "input", "help", "exit", "quit", "setattr", "delattr", "memoryview", "classmethod", "staticmethod",
    "property", "super",
})
#: Attributes of frames, code objects, generators and tracebacks.
FRAME = frozenset({
    "f_back", "f_locals", "f_globals", "f_builtins", "f_code", "f_lineno", "f_trace", "tb_frame",
    "tb_next", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "co_code", "co_consts",
    "co_names", "getframe", "currentframe", "get_objects", "get_referrers", "get_referents",
})
#: Hand-offs besides :data:`HAND_OFFS`, as ``origin:name``: the names the issue found missing.
SOFTMAX_EXTRA = ("torch:logsumexp", "torch:log_softmax", "torch:masked_softmax",
                 "torch:scaled_dot_product_attention", "torch:special", "scipy:special",
                 "torch:Softmax", "torch:LogSoftmax", "torch:Softmin", "torch:softmin",
                 # a softmax in disguise: a distribution's probabilities, a cross-entropy per
                 # class, a cumulative or pairwise logsumexp, attention's own weights
                 "torch:gumbel_softmax", "torch:distributions", "torch:cross_entropy",
                 "torch:CrossEntropyLoss", "torch:logcumsumexp", "numpy:logaddexp",
                 "torch:MultiheadAttention", "torch:multi_head_attention_forward", "torch:flex_attention")
#: Checks whose exercise computes a softmax (or an attention built on one).
SOFTMAX_CHECKS = ("check_masked_softmax", "check_local_p_weights", "check_temperature_softmax",
                  "check_softmax", "check_scaled_dot_product", "check_pixel_attention",
                  "check_label_smoothing", "check_online_softmax_update", "check_rescale_output",
                  "check_causal_linear_attention", "check_causal_early_exit")
EXTRA = {name: SOFTMAX_EXTRA for name in SOFTMAX_CHECKS}
#: Names the chapters import from the course package that stand for a library.
ALIASES = {"attncourse.kernels.triton_setup.tl": "triton.language", "attncourse.kernels.triton_setup.jit": "triton.jit",
           "attncourse.kernels.triton_setup.triton": "triton"}
#: Callables whose second argument (or first, for ``operator``'s) is an attribute name.
_BY_NAME = {"getattr": 1, "hasattr": 1, "operator.attrgetter": 0, "operator.methodcaller": 0}
_DUNDER = re.compile(r"^__\w+__$")


def _dotted(node: ast.AST, names: dict[str, str]) -> str | None:
    """``torch.nn.functional.softmax`` for ``F.softmax`` once ``F`` is known; ``None`` if not a known path."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, names)
        return f"{base}.{node.attr}" if base else None
    return None


def _constant(node: ast.AST) -> str | None:
    """A constant string, ``'soft' + 'max'`` and f-strings of constants folded; ``None`` otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _constant(node.left), _constant(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [_constant(v) for v in node.values]
        return "".join(parts) if all(p is not None for p in parts) else None
    return None


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Every name bound by an import or by a plain assignment of a known path, as its dotted path."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    names[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for _ in range(3):  # a = torch; b = a.nn; c = b.functional: follow a few steps
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                path = _dotted(node.value, names)
                if path:
                    names[node.targets[0].id] = path
    return {name: _alias(path) for name, path in names.items()}


def _alias(path: str) -> str:
    for course, library in ALIASES.items():
        if path == course or path.startswith(course + "."):
            return library + path[len(course):]
    return path



def _plain_constant(path: str) -> bool:
    """Whether ``path`` names a module-level number, string or bool of the course package
    (a chapter's setting, which an answer may read: it computes nothing)."""
    import importlib

    module, _, name = path.rpartition(".")
    try:
        value = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return False
    return name.isupper() and type(value) in (int, float, str, bool)

class _Rules:
    """An exercise's hand-offs and allowances, read from :data:`HAND_OFFS` and :data:`EXTRA`."""

    def __init__(self, check: str):
        rules = HAND_OFFS.get(check)
        entries = tuple(rules.library if rules else ()) + EXTRA.get(check, ())
        self.library: dict[str, set[str]] = {}
        for entry in entries:
            origin, name = entry.split(":", 1)
            self.library.setdefault(origin, set()).add(name)
        self.names = {name for names in self.library.values() for name in names}
        self.allow = tuple(_alias(a) for a in (rules.allow if rules else ()))
        self.kernel = bool(rules and rules.must_call)

    def path(self, path: str) -> str | None:
        """Why the dotted ``path`` is refused, or ``None``."""
        parts = path.split(".")
        if any(p in MODULES for p in parts) or (parts[0] == "torch" and len(parts) > 1
                                                and parts[1] in TORCH_MODULES):
            return f"`{path}` reaches the interpreter's machinery"
        if parts[0] in ("numpy", "torch", "scipy") and FILES & set(parts):
            return f"`{path}` reads or writes files"
        if parts[0] not in IMPORTABLE:
            return f"`{parts[0]}` is not a module answers may use (NumPy, torch, math...)"
        if any(p.startswith("_") for p in parts):
            return f"`{path}` is a private name"
        if parts[0] == "attncourse":
            if any(path == a or (a.rsplit(".", 1)[-1] == parts[-1] and path.startswith(a.split(".")[0]))
                   for a in self.allow):
                return None
            if _plain_constant(path):  # a chapter's settings (BATCH_SIZE = 32) compute nothing
                return None
            return f"`{path}` is the course package's: write the computation yourself"
        names = self.library.get(parts[0], set())
        hit = next((p for p in parts[1:] if p in names), None)
        if hit:
            return f"`{path}` computes what this exercise asks for"
        return None

    def attribute(self, attr: str) -> str | None:
        """Why reading ``.attr`` on anything is refused, or ``None``."""
        if _DUNDER.match(attr):
            return f"`{attr}` is a special attribute"
        if attr in FRAME or attr.lstrip("_") in FRAME:
            return f"`{attr}` reaches frames or the interpreter's objects"
        if attr in MODULES or attr in ATTRIBUTES:
            return f"`{attr}` reaches the interpreter's machinery"
        if attr.startswith("_"):
            return f"`{attr}` is a private attribute"
        if attr in self.names:
            return f"`.{attr}` computes what this exercise asks for"
        return None


def _kernels(tree: ast.AST) -> list[ast.FunctionDef]:
    """Functions decorated with ``jit`` (``@jit``, ``@triton.jit``, ``@triton.jit(...)``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                if (isinstance(target, ast.Name) and target.id == "jit") or (
                        isinstance(target, ast.Attribute) and target.attr == "jit"):
                    found.append(node)
    return found


def _node(node: ast.AST, rules: _Rules, names: dict[str, str]) -> str | None:
    """Why one node of the tree is refused, or ``None``."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        if isinstance(node, ast.ImportFrom) and (node.level or not node.module):
            return "a relative import"
        modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                   else [f"{node.module}.{a.name}" for a in node.names])
        for module in modules:
            why = rules.path(_alias(module))
            if why:
                return f"imports {why[why.index('`'):]}" if why.startswith("`") else why
    elif isinstance(node, ast.Name):
        if node.id in BUILTINS or node.id.startswith("__"):
            return f"`{node.id}` is not for answers"
        path = names.get(node.id)
        if path and path != node.id:
            return rules.path(path)
        if node.id in MODULES:
            return rules.path(node.id)
    elif isinstance(node, ast.Attribute):
        why = rules.attribute(node.attr)
        if why:
            return why
        path = _dotted(node, names)
        if path:
            why = rules.path(path)
            if why:
                return why
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                return f"assigns to `{path}`, a module's attribute"
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        if _DUNDER.match(node.value) or node.value in FRAME or node.value in MODULES:
            return f"the string {node.value!r} names the interpreter's machinery"
    elif isinstance(node, ast.Call):
        return _call(node, rules, names)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _DUNDER.match(node.name):
        return f"defines `{node.name}`, a special method (a lazy result is not an answer)"
    elif isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.Global, ast.Nonlocal)):
        return f"uses `{type(node).__name__.lower()}`, which no exercise needs"
    return None


def _call(node: ast.Call, rules: _Rules, names: dict[str, str]) -> str | None:
    """A call by attribute name (``getattr``, ``methodcaller``): its name must be a constant."""
    func = node.func
    path = func.id if isinstance(func, ast.Name) and func.id not in names else _dotted(func, names)
    if path == "type" and len(node.args) == 3:
        return "creates a class with type(...)"
    where = _BY_NAME.get(path or "")
    if where is None:
        return None
    if len(node.args) <= where:
        return f"calls {path} without a name"
    name = _constant(node.args[where])
    if name is None:
        return f"calls {path} with a name that is not a constant string"
    for attr in name.split("."):
        why = rules.attribute(attr)
        if why:
            return why
    if where == 1:
        base = _dotted(node.args[0], names)
        if base:
            return rules.path(f"{base}.{name}")
    return None


def refusal(source: str, check: str) -> str | None:
    """Why the extracted answer ``source`` of the exercise checked by ``check`` is refused, or ``None``.

    The reason is one line, e.g. "`torch.softmax` computes what this exercise asks for".
    A syntax error is a refusal too.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return f"not valid Python (line {err.lineno}: {err.msg})"
    rules = _Rules(check)
    names = _aliases(tree)
    for node in ast.walk(tree):
        why = _node(node, rules, names)
        if why:
            return why
    if rules.kernel:
        # A kernel under Triton's interpreter runs Python: torch or NumPy anywhere in the answer
        # (in the kernel, or in a helper it calls) could write the output for it.
        if not _kernels(tree):
            return "no function decorated with @jit: the exercise asks for a Triton kernel"
        for node in ast.walk(tree):
            path = _dotted(node, names) if isinstance(node, (ast.Name, ast.Attribute)) else None
            if path and not path.startswith("triton"):
                return f"the kernel's answer uses `{path}`: a Triton kernel computes with triton.language only"
    return None


__all__ = ["ALIASES", "ATTRIBUTES", "BUILTINS", "EXTRA", "FRAME", "IMPORTABLE", "MODULES", "TORCH_MODULES",
           "refusal"]
