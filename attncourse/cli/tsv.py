"""The ``train`` and ``evaluate`` commands' TSV files, read within the stated limits: a pair
above ``--max-tokens`` stops the command with its line number (or is skipped with
``--too-long skip``), and a line too long for that is refused before it is read.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attncourse.cli.options import length_hint
from attncourse.data.pairs import PairDataset, Splits, read_tsv
from attncourse.recipes.experiment import load_task

#: Bytes a line of a TSV file may have per token of --max-tokens (both sides together): a line longer
#: than that is refused (or skipped) before it is read, whatever its tokens, as the metrics (chrF) and
#: the tokenizer take time and memory by character. 64 bytes a token is eight times a long word.
LINE_BYTES_PER_TOKEN = 64


def long_lines(path: Path, limit: int) -> list[int]:
    """1-based numbers of the lines of ``path`` longer than ``limit`` bytes; read 1 MB at a time."""
    found, lineno, length = [], 1, 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            start = 0
            while (end := block.find(b"\n", start)) != -1:
                length += end - start
                if length > limit:
                    found.append(lineno)
                lineno, length, start = lineno + 1, 0, end + 1
            length += len(block) - start
    if length > limit:
        found.append(lineno)
    return found


def read_pairs(path: Path, level: str, max_src: int, max_tgt: int, hint: str, too_long: str,
                quiet: bool = False) -> PairDataset:
    """:func:`~attncourse.data.pairs.read_tsv` with the command's limits; says how many pairs were left out.

    Lines longer than :data:`LINE_BYTES_PER_TOKEN` x (``max_src`` + ``max_tgt``)
    bytes are refused (or, with ``--too-long skip``, left out) before they are read.
    """
    limit = LINE_BYTES_PER_TOKEN * (max_src + max_tgt)
    long = long_lines(path, limit)
    if long and too_long != "skip":
        raise ValueError(f"{path}, line {long[0]}: a line of more than {limit:,} bytes ({LINE_BYTES_PER_TOKEN} "
                         f"per token of the length limits); {hint}")
    with tempfile.TemporaryDirectory(prefix="attncourse-tsv-") as tmp:
        source = path
        if long:  # a copy with those lines blank: read_tsv skips blank lines, and line numbers stay
            source = Path(tmp) / path.name
            skip = set(long)
            with open(path, "rb") as f, open(source, "wb") as copy:
                for lineno, line in enumerate(_lines(f), 1):
                    copy.write(b"\n" if lineno in skip else line)
        try:
            data, skipped = read_tsv(source, level, name=path.stem, max_src_tokens=max_src,
                                     max_tgt_tokens=max_tgt, skip_long=too_long == "skip", hint=hint)
        except ValueError as err:
            raise ValueError(str(err).replace(str(source), str(path))) from None
    skipped = sorted(set(skipped) | set(long))
    if skipped and not quiet:
        lines = ", ".join(map(str, skipped[:5])) + (", ..." if len(skipped) > 5 else "")
        print(f"attncourse: note: left out {len(skipped)} pair(s) of {path} longer than the limit "
              f"(--too-long skip): line(s) {lines}", flush=True)
    return data


def _lines(f: Any) -> Iterator[bytes]:
    """The lines of a binary file, each with its end, 1 MB at a time (a long line is not held whole)."""
    pending = b""
    while block := f.read(1 << 20):
        pending += block
        *whole, pending = pending.split(b"\n")
        for line in whole:
            yield line + b"\n"
        if len(pending) > 1 << 20:  # a long line: only blanked, so its bytes are not needed
            pending = pending[-1:]
    if pending:
        yield pending


def load_pairs(args: argparse.Namespace, model_limit: int | None,
               quiet: bool = False) -> tuple[Splits | None, PairDataset, PairDataset, str]:
    """Return (generated splits or None, train dataset, valid dataset, level)."""
    if args.task is None:
        level = args.level or "word"
        limit, hint = length_hint(args.max_tokens, model_limit)
        train, valid = (read_pairs(path, level, limit, limit, hint, args.too_long, quiet)
                        for path in (args.train, args.valid))
        return None, train, valid, level
    splits = load_task(args.task, n_train=args.n_train, n_valid=args.n_valid, n_test=args.n_test,
                       seed=args.data_seed, max_value=args.max_value)
    if len(splits.train) == 0 or len(splits.valid) == 0:
        raise ValueError("--n-train and --n-valid must be at least 1")
    return splits, splits.train, splits.valid, splits.train.level
