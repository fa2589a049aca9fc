"""``python -m attncourse``: the command line.

``student-edition`` (:mod:`attncourse.course.cli`), ``prepare`` (train the chapters'
cached models before grading, :mod:`attncourse.course.prepare`) and ``grade`` (the grade of
record, :mod:`attncourse.course.grade_cli`) are the instructors' commands; every other command is the
training command line (:mod:`attncourse.cli.commands`).
"""

import os
import sys


def _run() -> int:
    if sys.argv[1:2] == ["student-edition"]:
        from attncourse.course.cli import main as course_main

        return course_main(sys.argv[2:])
    if sys.argv[1:2] == ["grade"]:
        from attncourse.course.grade_cli import main as grade_main

        return grade_main(sys.argv[2:])
    if sys.argv[1:2] == ["prepare"]:
        from attncourse.course.prepare import main as prepare_main

        return prepare_main(sys.argv[2:])
    from attncourse.cli import main

    return main()


if __name__ == "__main__":
    try:
        code = _run()
        if code == 130:
            # Interrupted, cleaned up, "interrupted" printed: end here. Python's own exit
            # could still die of the signal (status -2, in 2 of 6 Ctrl-Cs of training runs
            # in tools/hostile_cli.py; likely a KeyboardInterrupt that passed through C
            # code is remembered as unhandled even once caught) or abort in a destructor
            # of torch's (-6)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        sys.exit(code)
    except KeyboardInterrupt:  # Ctrl-C while torch is imported, before main() catches it itself
        print("attncourse: interrupted", file=sys.stderr, flush=True)
        # os._exit: nothing is written yet, and a Ctrl-C that cut an extension's import short can make
        # Python's own shutdown kill the process by the signal (status -2) after sys.exit(130)
        sys.stdout.flush()
        os._exit(130)
