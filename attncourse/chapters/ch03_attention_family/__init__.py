"""Chapter 3's own code: what only ``notebooks/03_attention_family.md`` uses.

See :mod:`attncourse.chapters`.
"""
