"""The grade of record's boundary: a student's answer runs in a process that holds nothing
of the grade (:mod:`.process`, :mod:`.child`), contained by the operating system
(:mod:`.contain`), and only data crosses (:mod:`.wire`)."""
