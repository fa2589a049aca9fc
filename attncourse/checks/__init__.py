"""The engine of the exercise checks, and the checks several chapters share.

A ``check_*`` function runs the learner's function on hidden cases and returns a
:class:`CheckResult`, shown in a notebook as a green or red box: the first failing case,
expected and got, and a hint; nothing is printed or raised. A chapter's own checks are in
its folder (``attncourse/chapters/chNN_<name>/checks.py``), built on :func:`run_cases` and
on :func:`attncourse.checks.guard.allowing` (what each check refuses).

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
