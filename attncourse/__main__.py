"""``python -m attncourse``: the command line (see :mod:`attncourse.train.cli`)."""

import sys

from attncourse.train.cli import main

if __name__ == "__main__":
    sys.exit(main())
