"""Chapter 10's own code: what only ``notebooks/10_serving_attention.md`` uses.

See :mod:`attncourse.chapters`.
"""
