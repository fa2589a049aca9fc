"""For instructors: student editions, nbgrader source notebooks and the guide's tables.

The top layer, beside :mod:`attncourse.checks` and :mod:`attncourse.widgets`: it reads the
chapters' MyST sources (``notebooks/*.md``) and imports nothing from the rest of the package
except the command line's helpers and the chapters' rubrics (:mod:`attncourse.chapters`).
"""
