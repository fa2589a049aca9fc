"""How the command line reads a value, and the parser generated from setting fields.

Every option is a dataclass field made with :func:`~attncourse.train.config.setting`
(:data:`attncourse.cli.option_fields.COMMANDS`); :func:`add_fields` makes it an argparse
argument (flag, default, help, choices or check from :data:`CHECKS`, range appended as
``[at most N]``). Errors are one line (:class:`Parser`).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterable
from dataclasses import Field
from pathlib import Path
from typing import Any, NoReturn

from attncourse.runtime import pick_device
from attncourse.train.config import format_number

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage block), in the same form as our own errors."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"attncourse: error: {message} (see '{self.prog} --help')\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # '--epochs=--': argparse drops the '--' and hands the option an empty list, unchecked
        if "--" in arg_strings and action.option_strings and action.nargs in (None, argparse.OPTIONAL):
            self.error(f"argument {'/'.join(action.option_strings)}: expected a value, got '--'")
        return super()._get_values(action, arg_strings)


def _parse(text: str, cast: type, what: str):
    """``cast(text)``, or the one-line argparse error that names what was expected.

    Python's int() and float() take any script's digits ('٥' is 5, '５' too): a number
    is written in ASCII here, so that what a command ran with reads as what was typed.
    """
    if not text.isascii():
        raise argparse.ArgumentTypeError(f"expected {what} in ASCII digits (0-9), got {text!r}")
    try:
        return cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def _int(text: str) -> int:
    return _parse(text, int, "a whole number")


def _float(text: str) -> float:
    return _parse(text, float, "a number")


def _text(text: str) -> str:
    return text


def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def _nonnegative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def _probability(text: str) -> float:
    value = _float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {text}")
    return value


def _dropout(text: str) -> float:
    value = _probability(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"dropout must be below 1, got {text}")
    return value


def _below_one(text: str) -> float:
    value = _probability(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text}")
    return value


def _nonnegative_float(text: str) -> float:
    value = _float(text)
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


#: Seeds go to torch (64-bit) and NumPy; fit adds the process's rank, so stay well inside 64 bits.
MAX_SEED = 2**63 - 1


def _seed(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected a seed from 0 to 2**63 - 1 ({MAX_SEED}), got {text}")
    return value


def _path(text: str) -> Path:
    if not text.strip():  # Path("") is the current directory
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return Path(text)


def _file(text: str) -> Path:
    # Path("RUN/new/") drops the slash: the command would write a file named "new"
    # where the user named a folder
    path = _path(text)
    if text != "-" and text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"expected a file name, got {text!r} (a path ending in '/' names a "
                                         "folder)")
    return path


def _device(text: str) -> str:
    try:
        pick_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


#: How the command line reads a setting's value (:func:`~attncourse.train.config.setting`'s ``check``).
CHECKS = {"positive_int": _positive_int, "nonnegative_int": _nonnegative_int, "positive_float": _positive_float,
          "nonnegative_float": _nonnegative_float, "probability": _probability, "below_one": _below_one,
          "dropout": _dropout, "seed": _seed, "device": _device, "path": _path, "file": _file, "int": _int,
          "float": _float, "text": _text}


def option_flag(f: Field) -> str:
    """The option that sets field ``f``: its ``flag`` (``num_heads`` is ``train``'s ``--heads``), or ``--name``."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def option_name(f: Field) -> str:
    """How messages name field ``f``'s argument: its flag, or the metavar of a positional argument (``DIR``)."""
    if f.metadata.get("positional"):
        return f.metadata.get("metavar") or f.name.upper()
    return option_flag(f)


def add_fields(target: Any, of: Iterable[Field], sections: dict[str, Any] | None = None) -> None:
    """Add each setting field of ``of`` to ``target`` (a parser or group) as an argument, in the
    ``--help`` section ``sections`` gives its ``group``: a preset-filled setting defaults to
    None, a boolean is ``--x/--no-x`` (or a switch), a ``repeat`` option collects a list.
    """
    for f in of:
        meta = f.metadata
        where = (sections or {}).get(meta["group"], target)
        text = meta["help"]
        if meta["limit"] is not None:
            text = f"{text} [at most {format_number(meta['limit'].high)}]"
        options: dict[str, Any] = {"help": text}
        if meta.get("positional"):
            options.update(type=CHECKS[meta["check"]], metavar=meta["metavar"])
            if meta["nargs"]:
                options.update(nargs=meta["nargs"], default=f.default)
            where.add_argument(f.name, **options)
            continue
        options.update(dest=f.name, default=None if meta["preset"] else f.default)
        if isinstance(f.default, bool) or meta["check"] == "switch":  # "switch": a bool, unset by default
            options["action"] = argparse.BooleanOptionalAction if meta.get("negatable", True) else "store_true"
        elif meta["choices"]:
            options["choices"] = meta["choices"]
        else:
            options.update(type=CHECKS[meta["check"]], metavar=meta["metavar"])
            if meta["nargs"]:
                options["nargs"] = meta["nargs"]
            if meta.get("repeat"):
                options["action"] = "append"
        if meta.get("required"):
            options["required"] = True
        where.add_argument(option_flag(f), **options)
