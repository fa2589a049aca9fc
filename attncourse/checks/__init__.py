"""Instant feedback on the course's coding exercises.

Each ``check_*`` function runs a learner's function on hidden cases and returns
a :class:`CheckResult`: truthy when all cases pass, and shown in a notebook as a
short green or red box that names the first failing case, what was expected
and what came back, and a hint. Nothing is printed and nothing is raised.

>>> from attncourse.checks import check_softmax
>>> check_softmax(my_softmax)  # doctest: +SKIP
✔ check_softmax: all 7 hidden cases pass

Chapters add their checks on top of the engine in :mod:`attncourse.checks.core`:
a list of :class:`Case` objects and :func:`run_cases`.
"""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "core": ("Case", "CheckResult", "run_cases", "to_numpy"),
    "graded": ("graded",),
    "guard": ("written",),
    "self_attention": ("check_causal_mask", "check_scaled_dot_product", "check_softmax"),
    "masks": ("check_masked_softmax", "check_padding_mask"),
    "seq2seq": ("check_additive_score", "check_gru_cell"),
})

__all__ = [
    "Case",
    "CheckResult",
    "check_additive_score",
    "check_causal_mask",
    "check_gru_cell",
    "check_masked_softmax",
    "check_padding_mask",
    "check_scaled_dot_product",
    "check_softmax",
    "graded",
    "run_cases",
    "to_numpy",
    "written",
]
