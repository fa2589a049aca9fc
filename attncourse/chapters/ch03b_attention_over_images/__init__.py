"""Chapter 3b's own code: what only ``notebooks/03b_attention_over_images.md`` uses.

See :mod:`attncourse.chapters`.
"""
