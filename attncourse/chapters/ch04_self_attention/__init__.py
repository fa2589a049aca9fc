"""Chapter 4's own code: what only ``notebooks/04_self_attention.md`` uses.

See :mod:`attncourse.chapters`.
"""
