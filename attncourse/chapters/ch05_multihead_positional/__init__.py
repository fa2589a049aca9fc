"""Chapter 5's own code: what only ``notebooks/05_multihead_positional.md`` uses.

See :mod:`attncourse.chapters`.
"""
