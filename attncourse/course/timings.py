"""Write ``book/chapter_timings.json`` from a book build's jupyter-cache records
(``make timings``), measured on 2 CPU cores: a test refuses any other count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from attncourse.course.guide import TIMINGS

ABOUT = ("Seconds each chapter takes to execute in the book build of `make test` on a fresh "
         "clone (first run: models trained), on 2 CPU cores, two chapters at a time (one per "
         "core). Written by `make timings` from "
         "jupyter-cache's records; read by the instructor's guide.")


def cache_seconds(cache: Path) -> dict[str, float]:
    """``{chapter: seconds}`` of the notebooks/ pages in a jupyter-cache (latest record each).

    Raises
    ------
    ValueError
        If ``cache`` is not a jupyter-cache folder.
    """
    from jupyter_cache import get_cache

    if not (cache / "global.db").exists():
        raise ValueError(f"{cache} is not a jupyter-cache folder (no global.db); run the book build first")
    latest: dict[str, tuple] = {}
    for record in get_cache(str(cache)).list_cache_records():
        path = Path(record.uri)
        seconds = (record.data or {}).get("execution_seconds")
        if path.parent.name == "notebooks" and seconds is not None:
            if path.stem not in latest or record.created > latest[path.stem][0]:
                latest[path.stem] = (record.created, seconds)
    return {name: round(seconds) for name, (_, seconds) in sorted(latest.items())}


def main(argv: list[str] | None = None) -> int:
    """Merge the cache's chapter times into the timings file (other chapters are kept)."""
    parser = argparse.ArgumentParser(prog="python -m attncourse.course.timings")
    parser.add_argument("cache", type=Path, help="a book build's .jupyter_cache folder")
    parser.add_argument("--out", type=Path, default=TIMINGS, help="default: %(default)s")
    args = parser.parse_args(argv)
    try:
        found = cache_seconds(args.cache)
    except ValueError as err:
        print(f"attncourse: error: {err}", file=sys.stderr)
        return 2
    old = json.loads(args.out.read_text(encoding="utf-8"))["seconds"] if args.out.exists() else {}
    data = {"about": ABOUT, "cpus": os.cpu_count(), "seconds": {**old, **found}}
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"{len(found)} chapter times written to {args.out}: {found}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
