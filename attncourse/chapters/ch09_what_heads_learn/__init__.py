"""Chapter 9's own code: what only ``notebooks/09_what_heads_learn.md`` uses.

See :mod:`attncourse.chapters`.
"""
