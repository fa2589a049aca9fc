"""attncourse: the helper package of an interactive course on attention mechanisms.

Subpackages, lowest layer first: ``functional`` (the maths) and ``kernels`` (the same maths
as Triton kernels; importing it imports triton), ``nn`` (modules),
``data`` (tasks and examples), ``train`` (running experiments), ``viz`` (static
figures), ``widgets`` (interactive explorers built on ``viz``) and ``checks``
(instant feedback on exercises).
"""

__version__ = "0.1.0"
