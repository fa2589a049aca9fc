"""Shared test settings."""

import sys

import pytest
import torch

# The models in the tests are tiny: on a small shared CPU one thread is several
# times faster than two, and results do not depend on the thread count.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def close_figures():
    """Close every figure a test leaves open (pyplot keeps them, and their memory, otherwise)."""
    yield
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")
