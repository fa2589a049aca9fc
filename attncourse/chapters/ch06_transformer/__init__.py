"""Chapter 6's own code: what only ``notebooks/06_transformer.md`` uses.

See :mod:`attncourse.chapters`.
"""
