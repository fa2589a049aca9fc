"""Static figures for the course, built on matplotlib."""

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
