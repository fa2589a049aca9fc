"""For instructors: student editions, nbgrader source notebooks, the grade of record and
the guide's tables; reads the chapters through :mod:`attncourse.chapters`.
"""
