"""Static figures for the course, built on matplotlib.

- :func:`heatmap`: a labelled matrix with the value written in each cell.
- :func:`plot_curves`: named line series against one x axis.
- :func:`plot_encoder_decoder`, :func:`plot_alignment`, :func:`plot_by_length`,
  :func:`plot_history`, :func:`plot_bahdanau_step`: the encoder-decoder chapters.
- :func:`plot_positional_encoding`, :func:`plot_head_maps`, :func:`plot_attention_maps`:
  multi-head attention, positions and the Transformer.
- :func:`plot_attention_overlay`, :func:`plot_seed_curves`: soft and hard attention over
  digit canvases, and learning curves over seeds.

The figures one chapter alone draws are its folder's ``figures`` (``attncourse/chapters/``).

Every function creates its figure with ``plt.subplots(..., layout="constrained")``
when no axes are given; close figures you no longer need with ``plt.close(fig)``.
"""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "curves": ("plot_curves",),
    "heatmap": ("heatmap",),
    "images": ("plot_attention_overlay", "plot_seed_curves"),
    "seq2seq": ("plot_alignment", "plot_bahdanau_step", "plot_by_length", "plot_encoder_decoder", "plot_history"),
    "transformer": ("ATTENTION_KINDS", "dimension_wavelength", "plot_attention_maps", "plot_head_maps",
        "plot_positional_detail", "plot_positional_encoding"),
})

__all__ = [
    "plot_attention_overlay",
    "plot_seed_curves",
    "ATTENTION_KINDS",
    "dimension_wavelength",
    "plot_attention_maps",
    "plot_head_maps",
    "plot_positional_detail",
    "plot_positional_encoding",
    "heatmap",
    "plot_alignment",
    "plot_bahdanau_step",
    "plot_by_length",
    "plot_curves",
    "plot_encoder_decoder",
    "plot_history",
]
