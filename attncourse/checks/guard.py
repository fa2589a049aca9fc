"""What a check refuses while the learner's function runs, and how it tells a stub.

:func:`refused` swaps the package's own versions of the exercise (its references) for
raising stand-ins; :func:`watching` follows every call (``sys.setprofile``) and records the
hand-offs a check's :class:`HandOffs` names: a library function that does the exercise's
work, the package outside the checks, a chapter's helper from another cell. Each check
registers its rules with :func:`allowing`. :func:`is_stub` tells an unwritten answer
(``...``, ``pass``, ``raise NotImplementedError()``) from a wrong one.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any


class ReferenceCalled(BaseException):
    """Raised by the stand-in of a refused reference (a ``BaseException``, so that a
    learner's ``except Exception`` does not hide it)."""


def reference_name(ref: Any) -> str:
    """``attncourse.functional.numpy_attention.softmax``: where a reference is defined."""
    module = getattr(ref, "__module__", None) or ""
    name = getattr(ref, "__qualname__", None) or getattr(ref, "__name__", None) or repr(ref)
    return f"{module}.{name}" if module else name


def unwrap(fn: Any) -> Any:
    """The function under partials, bound methods and ``functools.wraps`` layers."""
    for _ in range(10):
        inner = (getattr(fn, "func", None) if isinstance(fn, functools.partial)
                 else getattr(fn, "__wrapped__", None) or getattr(fn, "__func__", None))
        if inner is None:
            return fn
        fn = inner
    return fn


def is_reference(fn: Any, references: Sequence[Any]) -> Any:
    """The reference that ``fn`` is (or wraps), or ``None``."""
    inner = unwrap(fn)
    code = getattr(inner, "__code__", None)
    for ref in references:
        if inner is ref or (code is not None and code is getattr(unwrap(ref), "__code__", None)):
            return ref
    return None


@contextlib.contextmanager
def refused(references: Sequence[Any], fn: Any) -> Iterator[list[str]]:
    """Replace every reference by a raising stand-in while ``fn`` runs (in the loaded
    ``attncourse`` modules, ``fn``'s globals, closure and defaults); yield the calls made."""
    calls: list[str] = []

    def stand_in(ref: Any) -> Callable:
        name = reference_name(ref)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise ReferenceCalled(name)
        return refuse

    swaps: list[tuple[Any, Any, Any]] = []  # (namespace or closure cell, key, original)
    if references:
        by_id = {id(ref): stand_in(ref) for ref in references}
        spaces = [vars(module) for key, module in list(sys.modules.items())
                  if module is not None and (key == "attncourse" or key.startswith("attncourse."))]
        inner = unwrap(fn)
        own = getattr(inner, "__globals__", None)
        if isinstance(own, dict):
            spaces.append(own)
        for space in spaces:
            for key, value in list(space.items()):
                if id(value) in by_id:
                    swaps.append((space, key, value))
                    space[key] = by_id[id(value)]
        # A reference held by a closure (a function defined inside another) or a default.
        for cell in getattr(inner, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                if id(cell.cell_contents) in by_id:
                    swaps.append((cell, None, cell.cell_contents))
                    cell.cell_contents = by_id[id(cell.cell_contents)]
        defaults = getattr(inner, "__defaults__", None)
        if defaults and any(id(d) in by_id for d in defaults):
            swaps.append((inner, "__defaults__", defaults))
            inner.__defaults__ = tuple(by_id.get(id(d), d) for d in defaults)
    try:
        yield calls
    finally:
        for where, key, value in reversed(swaps):
            if isinstance(where, dict):
                where[key] = value
            elif key is None:
                where.cell_contents = value
            else:
                setattr(where, key, value)


#: The function names of the course's coding exercises: a learner's earlier answer (their
#: own ``my_softmax``) stays usable in a later exercise although it sits in another cell.
#: A test keeps this equal to the chapters' exercises.
EXERCISE_FUNCTIONS = frozenset({
    "my_cache_bytes", "copying_score", "left_padded_causal_mask", "lookup", "my_additive_score",
    "my_attention", "my_causal_kernel", "my_causal_linear", "my_causal_mask", "my_general_score",
    "my_gru_cell", "my_kernel_bytes", "my_local_p_weights", "my_lrate", "my_masked_softmax",
    "my_merge_heads", "my_padding_mask", "my_penalty", "my_pixel_attention", "my_receptive_field",
    "my_reinforce_loss", "my_rescale", "my_smoothed_loss", "my_softmax", "my_split_heads",
    "my_update", "per_channel_int8", "my_prefix_matching_score", "repeat_kv", "residual", "rope",
    "fold_gain", "min_p_probs", "quantize_q4_1",
    "alibi_far_bias", "stretched_frequencies", "yarn_frequencies",
    "delta_transition", "gated_retention", "my_decay_matrix", "wy_factors", "square_map_reads",
    "state_bytes",
    "my_causal_attention", "my_block", "my_gpt", "my_train",
    "my_padded_attention", "my_bert_mask", "my_patchify", "my_rollout", "my_mean_pool",
    "my_high_norm_share",
    "t5_bucket", "packed_positions", "window_tiles", "sink_window", "padding_fraction",
    "merge_attention",
})
#: Library functions that compute a softmax: no exercise that asks for one may call them.
SOFTMAX = ("torch:softmax", "torch:log_softmax", "torch:_softmax", "torch:special_softmax",
           "torch:Softmax", "scipy:softmax", "scipy:log_softmax", "scipy:logsumexp",
           # easy to miss: each computes a softmax too (or attention, its weights)
           "torch:logsumexp", "torch:_log_softmax", "torch:special_log_softmax", "torch:_masked_softmax",
           "torch:scaled_dot_product_attention", "torch:masked_softmax", "torch:LogSoftmax",
           "torch:Softmin", "torch:softmin", "torch:gumbel_softmax", "torch:cross_entropy",
           "torch:CrossEntropyLoss", "torch:logcumsumexp", "numpy:logaddexp",
           "torch:multi_head_attention_forward", "torch:MultiheadAttention", "torch:flex_attention")
#: Library attention: no exercise about attention weights or outputs may call it.
ATTENTION = ("torch:scaled_dot_product_attention", "torch:multi_head_attention_forward",
             "torch:MultiheadAttention", "torch:flex_attention", "torch:_scaled_dot_product_attention_math")
#: Library attention layers and Transformer blocks (chapters 7b and 13).
TRANSFORMER_LAYERS = ATTENTION + ("torch:TransformerEncoderLayer", "torch:TransformerDecoderLayer",
                                  "torch:Transformer", "torch:TransformerEncoder", "torch:TransformerDecoder")


@dataclass(frozen=True)
class HandOffs:
    """What a check refuses while the learner's function runs, besides its references.

    Attributes
    ----------
    uses : str
        What the learner may use, shown with every refusal.
    library : tuple of str
        ``"origin:name"``: a function, method or class ``name`` of a module under ``origin``.
    package : bool
        Refuse the package outside the checks, but ``allow`` (``module.qualname``): with what
        it calls and the package objects it returns (their methods, and what these run
        through a library).
    namespace : bool
        Refuse the notebook's functions from other cells, but earlier answers.
    must_call, must_call_message : tuple of str, str
        Functions of which one must run, and the refusal when none did.
    calls : tuple of str
        ``module:qualname`` of a chapter's function the check calls the learner's through;
        the grade of record runs it in the answer's process.
    """

    uses: str
    library: tuple[str, ...] = ()
    package: bool = True
    allow: tuple[str, ...] = ()
    namespace: bool = True
    must_call: tuple[str, ...] = ()
    must_call_message: str = ""
    calls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Built from JSON in the answer's process: lists become the tuples they were.
        for name in ("library", "allow", "must_call", "calls"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


#: Each check's :class:`HandOffs` by the check's name, registered by :func:`allowing` when
#: the check's module is imported.
HAND_OFFS: dict[str, HandOffs] = {}
_REGISTERED_BY: dict[str, str] = {}


def allowing(uses: str, **rules: Any) -> Callable[[Callable], Callable]:
    """Register ``HandOffs(uses, **rules)`` as the decorated check's rules.

    Raises
    ------
    ValueError
        If a check of another module already has that name.
    """
    hand_offs = HandOffs(uses, **rules)

    def register(check: Callable) -> Callable:
        owner = _REGISTERED_BY.setdefault(check.__name__, check.__module__)
        if owner != check.__module__:
            raise ValueError(f"two checks named {check.__name__}: in {owner} and {check.__module__}")
        HAND_OFFS[check.__name__] = hand_offs
        return check
    return register


def _origin(module: str) -> str:
    return module.split(".", 1)[0]


def _called(frame: Any, event: str, arg: Any) -> tuple[str, str]:
    """``(module, qualname)`` of what a profile event calls (a Python frame or a C function)."""
    if event == "call":
        return frame.f_globals.get("__name__") or "", frame.f_code.co_qualname
    module = getattr(arg, "__module__", None)
    owner = getattr(arg, "__self__", None)
    if not module:  # a method of a C type, e.g. Tensor.softmax: the module of its owner
        module = type(owner).__module__ if owner is not None else ""
    if type(owner).__name__ == "ufunc":  # np.logaddexp.reduce: named by its ufunc
        return "numpy", f"{getattr(owner, '__name__', 'ufunc')}.{getattr(arg, '__name__', '')}"
    qualname = getattr(arg, "__qualname__", None) or getattr(arg, "__name__", "") or ""
    return module, qualname.replace("_VariableFunctionsClass.", "")


def _named(qualname: str, names: set[str]) -> bool:
    parts = qualname.split(".")
    return qualname in names or parts[0] in names or parts[-1] in names


_CLASS_ATTRIBUTES = type.__dict__["__dict__"]
_CLASS_NAME = type.__dict__["__name__"]


def _package_object(obj: Any) -> bool:
    """Whether ``obj``'s class is one its package module defines (read without running a
    metaclass's code)."""
    cls = type(obj)
    name = _CLASS_ATTRIBUTES.__get__(cls).get("__module__")
    module = sys.modules.get(name) if isinstance(name, str) and name.startswith("attncourse.") else None
    return module is not None and vars(module).get(_CLASS_NAME.__get__(cls)) is cls


def _runs_for(frame: Any, handed: dict[int, Any], learner_globals: Any, depth: int = 12) -> bool:
    """Whether package code in ``frame`` runs for an object in ``handed``: the frame, or a
    library frame below it on the stack, is a method of that object."""
    for _ in range(depth):
        code = frame.f_code
        if code.co_argcount and id(frame.f_locals.get(code.co_varnames[0])) in handed:
            return True
        frame = frame.f_back
        if frame is None or frame.f_globals is learner_globals or (
                frame.f_globals.get("__name__") or "").startswith("attncourse"):
            return False
    return False


@dataclass
class HandOff:
    """A hand-off seen by :func:`watching`: what was called and which rule refuses it."""

    kind: str  # "library", "package", "namespace" or "missing"
    name: str


def _chapter_checks(module: str) -> bool:
    """Whether ``module`` is a chapter's ``*checks`` or ``calls`` module."""
    parts = module.split(".")
    return (len(parts) == 4 and parts[:2] == ["attncourse", "chapters"]
            and parts[3].endswith(("checks", "calls")))


@contextlib.contextmanager
def watching(rules: HandOffs | None, learner: Any) -> Iterator[list[HandOff]]:
    """Yield the list of the hand-offs ``rules`` refuse among the calls made in this block
    (``learner``'s globals and cell tell the chapter's functions); a ``"missing"`` entry ends
    it when none of ``rules.must_call`` ran. A profiler already set is put back after."""
    seen: list[HandOff] = []
    if rules is None:
        yield seen
        return
    library: dict[str, set[str]] = {}
    for entry in rules.library:
        origin, name = entry.split(":", 1)
        library.setdefault(origin, set()).add(name)
    inner = unwrap(learner)
    code = getattr(inner, "__code__", None)
    own_globals = getattr(inner, "__globals__", None)
    own_file = code.co_filename if code is not None else None
    allowed: list[Any] = []  # frames of allowed package functions now running
    handed: dict[int, Any] = {}  # package objects they returned, by id (kept alive here)
    ran: list[str] = []
    must_call_origins = {_origin(name) for name in rules.must_call}

    def profile(frame: Any, event: str, arg: Any) -> None:
        # Called on every call and return while the learner's function runs (a Triton
        # kernel under the interpreter makes many): the common case returns early.
        if event == "call":
            module = frame.f_globals.get("__name__") or ""
        elif event == "c_call":
            module = getattr(arg, "__module__", None) or ""
            if not module:  # a method of a C type, e.g. Tensor.softmax: its owner's module
                owner = getattr(arg, "__self__", None)
                module = type(owner).__module__ if owner is not None else ""
        else:
            if event == "return" and allowed and allowed[-1] is frame:
                allowed.pop()
                if arg is not None and _package_object(arg):
                    handed[id(arg)] = arg
            return
        if allowed:
            return
        origin = module.partition(".")[0]
        names = library.get(origin)
        if names is None and origin != "attncourse" and not (
                rules.namespace and event == "call" and frame.f_globals is own_globals) and not (
                must_call_origins and origin in must_call_origins and not ran):
            return
        module, qualname = _called(frame, event, arg)
        full = f"{module}.{qualname}"
        if full in rules.must_call:
            ran.append(full)
        if names and _named(qualname, names):
            seen.append(HandOff("library", full))
        elif origin == "attncourse":
            if full in rules.allow or (handed and event == "call" and _runs_for(frame, handed, own_globals)):
                if event == "call":
                    allowed.append(frame)
            elif rules.package and not (module.startswith(("attncourse.checks", "attncourse.course.sandbox"))
                                        or _chapter_checks(module)):
                seen.append(HandOff("package", full))
        elif (rules.namespace and event == "call" and own_globals is not None
              and frame.f_globals is own_globals and frame.f_code.co_filename != own_file
              and frame.f_code.co_name not in EXERCISE_FUNCTIONS
              # a function nested in an earlier answer is part of that answer
              and frame.f_code.co_qualname.split(".")[0] not in EXERCISE_FUNCTIONS
              and frame.f_code.co_name not in ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")):
            seen.append(HandOff("namespace", qualname))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)
        if rules.must_call and not ran:
            seen.append(HandOff("missing", ""))


def is_stub(fn: Any) -> bool:
    """Whether ``fn``'s body is a stub (:func:`stub_definition`); an answer graded in its own
    process carries ``answer_is_stub``."""
    stub = getattr(unwrap(fn), "answer_is_stub", None) if getattr(unwrap(fn), "is_remote", False) else None
    if isinstance(stub, bool):
        return stub
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(unwrap(fn))))
    except (OSError, TypeError, SyntaxError):
        return False
    return stub_definition(tree.body[0] if tree.body else None)


def stub_definition(node: ast.AST | None) -> bool:
    """Whether ``node`` is a function definition whose body is only ``...``, ``pass``, a
    docstring or ``raise NotImplementedError``."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for statement in node.body:
        if isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr)
                                               and isinstance(statement.value, ast.Constant)):
            continue
        if isinstance(statement, ast.Raise) and "NotImplementedError" in ast.unparse(statement):
            continue
        return False
    return True



def written(*functions: Any) -> bool:
    """Whether none of ``functions`` is a stub (:func:`is_stub`); else print which ones a
    cell of the student edition waits for (:mod:`attncourse.course.waiting`) and say False."""
    missing = [getattr(unwrap(fn), "__name__", "?") for fn in functions if is_stub(fn)]
    if missing:
        names = " and ".join(f"`{name}`" for name in missing)
        print(f"This cell runs your {names}: it waits until you write "
              f"{'them' if len(missing) > 1 else 'it'} above (the check says "
              "'not passed yet' until then).")
    return not missing

__all__ = ["ATTENTION", "EXERCISE_FUNCTIONS", "HAND_OFFS", "SOFTMAX", "TRANSFORMER_LAYERS", "HandOff", "HandOffs",
           "ReferenceCalled", "allowing", "is_reference", "is_stub", "reference_name", "refused", "stub_definition",
           "unwrap", "watching", "written"]
