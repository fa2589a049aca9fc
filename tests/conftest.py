"""Shared test settings."""

import sys

import pytest
import torch

# Before any test imports triton (some do, through torch): on a machine without a GPU the
# package chooses Triton's interpreter, which must happen before triton's language is
# defined, as chapter 8's first import does in its own kernel (attncourse/kernels/triton_setup.py).
import attncourse.kernels  # noqa: F401

# The models in the tests are tiny: on a small shared CPU one thread is several
# times faster than two, and results do not depend on the thread count.
torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def _runs_in_a_scratch_folder(tmp_path_factory):
    """The tests' trained runs go to a scratch folder: never into the reader's _build/runs,
    and never shared by two pytest-xdist workers training the same run at once."""
    patch = pytest.MonkeyPatch()
    patch.setenv("ATTNCOURSE_RUNS", str(tmp_path_factory.mktemp("runs")))
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _checks_start_with_full_hints():
    """Each test sees the checks' full hints: the nudge of a first attempt is tested on its own
    (tests/checks/test_references.py)."""
    from attncourse.checks import core

    core._failed_attempts.clear()
    saved, core.NUDGE_ATTEMPTS = core.NUDGE_ATTEMPTS, 0
    yield
    core.NUDGE_ATTEMPTS = saved
    core._failed_attempts.clear()


@pytest.fixture(autouse=True)
def close_figures():
    """Close every figure a test leaves open (pyplot keeps them, and their memory, otherwise)."""
    yield
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")
