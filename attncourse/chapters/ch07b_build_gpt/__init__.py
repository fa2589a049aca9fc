"""Chapter 7b's own code: what only ``notebooks/07b_build_gpt.md`` uses.

See :mod:`attncourse.chapters`.
"""
