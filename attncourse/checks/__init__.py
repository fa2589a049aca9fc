"""The engine of the exercise checks (:mod:`~attncourse.checks.core`, :mod:`~attncourse.checks.guard`)
and the checks several chapters share; a chapter's own are in its folder's ``checks.py``.

>>> from attncourse.checks import check_causal_mask
>>> check_causal_mask(my_causal_mask)  # doctest: +SKIP
✔ check_causal_mask: all 3 hidden cases pass
"""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "core": ("Case", "CheckResult", "run_cases", "to_numpy"),
    "graded": ("graded",),
    "guard": ("written",),
    "masks": ("check_causal_mask",),
})

__all__ = [
    "Case",
    "CheckResult",
    "check_causal_mask",
    "graded",
    "run_cases",
    "to_numpy",
    "written",
]
