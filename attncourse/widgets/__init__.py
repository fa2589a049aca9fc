"""Interactive explorers for notebooks, built with ipywidgets on top of :mod:`attncourse.viz`.

Each explorer draws the same static figures that the chapters show next to it,
so what a learner sees while exploring matches the printed page.
They share their layout, display and redrawing through
:class:`attncourse.widgets.base.Explorer`.
"""

from attncourse.widgets.bahdanau import BahdanauStepper
from attncourse.widgets.decoder_only import DecoderOnlyExplorer
from attncourse.widgets.explorer import AttentionExplorer
from attncourse.widgets.flash import FlashAttentionExplorer
from attncourse.widgets.induction import InductionExplorer
from attncourse.widgets.local_window import LocalWindow
from attncourse.widgets.paged_cache import PagedCacheExplorer
from attncourse.widgets.positional import PositionalEncodingExplorer
from attncourse.widgets.stepper import SelfAttentionStepper
from attncourse.widgets.temperature import TemperatureExplorer

__all__ = [
    "AttentionExplorer",
    "BahdanauStepper",
    "DecoderOnlyExplorer",
    "FlashAttentionExplorer",
    "InductionExplorer",
    "LocalWindow",
    "PagedCacheExplorer",
    "PositionalEncodingExplorer",
    "SelfAttentionStepper",
    "TemperatureExplorer",
]
