"""``python -m attncourse``: the command line.

``student-edition`` is the instructors' command (:mod:`attncourse.course.cli`); every
other command is the training command line (:mod:`attncourse.cli.commands`).
"""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["student-edition"]:
        from attncourse.course.cli import main as course_main

        sys.exit(course_main(sys.argv[2:]))
    from attncourse.cli import main

    sys.exit(main())
