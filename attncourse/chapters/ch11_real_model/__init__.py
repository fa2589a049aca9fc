"""Chapter 11's own code: what only ``notebooks/11_real_model.md`` uses.

See :mod:`attncourse.chapters`.
"""
