"""Chapter 8's own code: what only ``notebooks/08_attention_at_scale.md`` uses.

See :mod:`attncourse.chapters`.
"""
