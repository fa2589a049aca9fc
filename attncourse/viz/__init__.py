"""Static figures for the course, built on matplotlib.

- :func:`heatmap`: a labelled matrix with the value written in each cell.
- :func:`plot_curves`: named line series against one x axis.
- :func:`plot_step` and :data:`STEP_FIGURES`: one figure per step of
  self-attention, drawn from a :class:`attncourse.functional.SelfAttentionTrace`.
- :func:`plot_encoder_decoder`, :func:`plot_alignment`, :func:`plot_by_length`,
  :func:`plot_history`, :func:`plot_bahdanau_step`: the encoder-decoder chapters.
- :func:`plot_positional_encoding`, :func:`plot_head_maps`, :func:`plot_attention_maps`:
  multi-head attention, positions and the Transformer.
- :func:`plot_local_window`, :func:`plot_alignment_windows`, :func:`plot_cost`,
  :func:`plot_temperature`, :func:`plot_tempered_weights`: Luong's global and local
  attention, and the temperature between soft and hard attention.
- :func:`plot_attention_overlay`, :func:`plot_seed_curves`: soft and hard attention over
  digit canvases, and learning curves over seeds.
- :func:`plot_online_softmax`, :func:`plot_tiles`, :func:`plot_loglog`,
  :func:`plot_roofline`: FlashAttention's online softmax and tiles, costs against n.
- :func:`plot_pixel_attention`, :func:`plot_pixel_attention_row`: where one position of a
  CNN feature map looks, with self-attention inside the CNN.

Every function creates its figure with ``plt.subplots(..., layout="constrained")``
when no axes are given; close figures you no longer need with ``plt.close(fig)``.
"""

from attncourse.viz.conv_attention import plot_pixel_attention, plot_pixel_attention_row
from attncourse.viz.curves import plot_curves
from attncourse.viz.heatmap import heatmap
from attncourse.viz.images import plot_attention_overlay, plot_seed_curves
from attncourse.viz.luong import (
    LocalWeights,
    local_weights,
    plot_alignment_windows,
    plot_cost,
    plot_local_window,
    plot_temperature,
    plot_tempered_weights,
)
from attncourse.viz.scale import (
    plot_loglog,
    plot_online_softmax,
    plot_roofline,
    plot_tiles,
    tile_states,
)
from attncourse.viz.self_attention import (
    STEP_FIGURES,
    plot_project,
    plot_scale,
    plot_score,
    plot_softmax,
    plot_step,
    plot_sum,
    plot_weight,
    step_name,
)
from attncourse.viz.seq2seq import (
    plot_alignment,
    plot_bahdanau_step,
    plot_by_length,
    plot_encoder_decoder,
    plot_history,
)
from attncourse.viz.transformer import (
    ATTENTION_KINDS,
    dimension_wavelength,
    plot_attention_maps,
    plot_head_maps,
    plot_positional_detail,
    plot_positional_encoding,
)

__all__ = [
    "plot_loglog",
    "plot_online_softmax",
    "plot_roofline",
    "plot_tiles",
    "tile_states",
    "plot_attention_overlay",
    "plot_seed_curves",
    "plot_pixel_attention",
    "plot_pixel_attention_row",
    "LocalWeights",
    "local_weights",
    "plot_alignment_windows",
    "plot_cost",
    "plot_local_window",
    "plot_tempered_weights",
    "plot_temperature",
    "ATTENTION_KINDS",
    "dimension_wavelength",
    "plot_attention_maps",
    "plot_head_maps",
    "plot_positional_detail",
    "plot_positional_encoding",
    "STEP_FIGURES",
    "heatmap",
    "plot_alignment",
    "plot_bahdanau_step",
    "plot_by_length",
    "plot_curves",
    "plot_encoder_decoder",
    "plot_history",
    "plot_project",
    "plot_scale",
    "plot_score",
    "plot_softmax",
    "plot_step",
    "plot_sum",
    "plot_weight",
    "step_name",
]
