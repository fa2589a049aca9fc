"""Chapter 13's own code: what only ``notebooks/13_encoders.md`` uses.

See :mod:`attncourse.chapters`.
"""
