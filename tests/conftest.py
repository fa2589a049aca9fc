"""Shared test settings."""

import torch

# The models in the tests are tiny: on a small shared CPU one thread is several
# times faster than two, and results do not depend on the thread count.
torch.set_num_threads(1)
