"""Chapter 12's own code: what only ``notebooks/12_long_context.md`` uses.

See :mod:`attncourse.chapters`.
"""
