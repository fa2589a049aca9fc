"""The grade of record's boundary: the answer runs in a contained process holding nothing of
the grade (:mod:`.process`, :mod:`.child`, :mod:`.contain`); only data crosses (:mod:`.wire`).
"""
