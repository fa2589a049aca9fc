"""Property test: every numeric option of every sub-command, given extreme values.

Hypothesis draws one or two numeric options of a sub-command and gives each an extreme
value (0, negative, tiny, subnormal, beyond float32 and int64, infinities, NaN), on top
of a tiny run (a few pairs, one epoch, a model a few units wide). Whatever it draws:

* the exit status is 0 (the value is valid: the tiny run ran) or 2 (one error line);
* stderr holds no traceback, and an error is one line naming an option or a file;
* nothing is written outside the run's own directory (the current directory is watched).

The examples are derandomized (the same ones on every run, so CI is reproducible) and
bounded: about 40 per sub-command, a few seconds each at most.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attncourse.cli.commands import main
from tests.cli.test_commands import write_tsv

EXTREMES = [
    "0",
    "-1",
    "1",
    "2",
    "1e-320",
    "5e-324",
    "1e-40",
    "0.5",
    "3.5e38",
    "1e308",
    "2147483648",
    str(2**63 - 1),
    str(2**63),
    str(2**64),
    "1" + "0" * 30,
    "inf",
    "-inf",
    "nan",
    "-0.0",
    "1e-7",
]
#: A tiny numbers task the train runs below share.
TINY_TASK = ["--task", "numbers-en-fr", "--n-train", "8", "--n-valid", "4", "--n-test", "2",
             "--max-value", "100"]
TINY_RNN = [*TINY_TASK, "--model", "rnn", "--epochs", "1", "--emb-dim", "4", "--hidden-dim", "8",
            "--batch-size", "8", "--no-progress"]
TINY_TRANSFORMER = [*TINY_TASK, "--model", "transformer", "--epochs", "1", "--d-model", "8",
                    "--heads", "2", "--layers", "1", "--d-ff", "16", "--batch-size", "8",
                    "--no-progress"]
TINY_LM = [
    "--steps",
    "2",
    "--steps-per-epoch",
    "1",
    "--context",
    "8",
    "--d-model",
    "8",
    "--num-heads",
    "2",
    "--num-layers",
    "1",
    "--d-ff",
    "16",
    "--batch-size",
    "4",
    "--max-len",
    "16",
    "--no-progress",
]
#: (base arguments, numeric options): each drawn option replaces its value in the base, or is added.
COMMANDS = {
    "train-rnn": (
        ["train", *TINY_RNN],
        [
            "--n-train",
            "--n-valid",
            "--n-test",
            "--max-value",
            "--data-seed",
            "--emb-dim",
            "--hidden-dim",
            "--dropout",
            "--epochs",
            "--batch-size",
            "--lr",
            "--clip-norm",
            "--label-smoothing",
            "--adam-eps",
            "--weight-decay",
            "--teacher-forcing",
            "--patience",
            "--seed",
            "--threads",
            "--betas",
            "--time-budget",
        ],
    ),
    "train-transformer": (
        ["train", *TINY_TRANSFORMER],
        [
            "--d-model",
            "--heads",
            "--layers",
            "--d-ff",
            "--dropout",
            "--warmup",
            "--lr-scale",
            "--batch-size",
        ],
    ),
    "train-tsv": (
        [
            "train",
            "--train",
            "{train}",
            "--valid",
            "{valid}",
            "--model",
            "rnn",
            "--epochs",
            "1",
            "--emb-dim",
            "4",
            "--hidden-dim",
            "8",
            "--no-progress",
        ],
        ["--max-tokens"],
    ),
    "evaluate": (
        ["evaluate", "{run}", "--test", "{test}", "--batch-size", "4"],
        [
            "--max-tokens",
            "--beam-size",
            "--length-penalty",
            "--batch-size",
            "--threads",
            "--edges",
        ],
    ),
    "train-lm": (
        ["train-lm", "--text", "{text}", *TINY_LM],
        [
            "--valid-fraction",
            "--max-chars",
            "--num-kv-heads",
            "--window",
            "--d-model",
            "--num-heads",
            "--num-layers",
            "--d-ff",
            "--max-len",
            "--context",
            "--batch-size",
            "--steps",
            "--steps-per-epoch",
            "--warmup",
            "--lr",
            "--seed",
            "--threads",
        ],
    ),
    "sample": (
        ["sample", "{lm}", "--length", "4"],
        ["--length", "--temperature", "--top-k", "--seed"],
    ),
}
TWO_VALUES = {"--betas"}
_counter = itertools.count()


def write_data(root: Path) -> dict[str, Path]:
    """The tiny runs' data in ``root / "data"`` (train, valid, test TSVs, a text) and their folders."""
    data = root / "data"
    data.mkdir()
    paths = {
        "train": write_tsv(data / "train.tsv", 16),
        "valid": write_tsv(data / "valid.tsv", 4, offset=1),
        "test": write_tsv(data / "test.tsv", 4, offset=2),
        "text": data / "text.txt",
        "run": root / "run",
        "lm": root / "lm",
    }
    paths["text"].write_text("the attention is all you need. " * 20, encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A finished train run and train-lm run, their data, and a folder for the examples' runs."""
    root = tmp_path_factory.mktemp("extremes")
    paths = write_data(root)
    assert main(["train", *TINY_RNN, "--out", str(paths["run"])]) == 0
    assert (
        main(["train-lm", "--text", str(paths["text"]), *TINY_LM, "--out", str(paths["lm"])])
        == 0
    )
    return root, {k: str(v) for k, v in paths.items()}


def snapshot(root: Path, skip: Path | None) -> dict[str, str]:
    """Path -> SHA-256 of every file under ``root``, except under ``skip``."""
    out = {}
    for path in root.rglob("*"):
        if path.is_file() and (skip is None or skip not in path.parents):
            out[str(path.relative_to(root))] = hashlib.sha256(
                path.read_bytes()
            ).hexdigest()
    return out


def build_argv(
    command: str, choices: list[tuple[str, str]], paths: dict[str, str], out: Path
) -> list[str]:
    base, _ = COMMANDS[command]
    argv = [a.format(**paths) for a in base]
    for option, value in choices:
        values = [value, value] if option in TWO_VALUES else [value]
        if option in argv and option not in TWO_VALUES:
            argv[argv.index(option) + 1] = value
        else:
            argv += [option, *values]
    if argv[0] in ("train", "train-lm"):
        argv += ["--out", str(out)]
    return argv


def drawn(command: str):
    options = COMMANDS[command][1]
    pair = st.tuples(st.sampled_from(options), st.sampled_from(EXTREMES))
    return st.lists(pair, min_size=1, max_size=2, unique_by=lambda p: p[0])


def check(command: str, choices, workspace, capsys, monkeypatch) -> None:
    root, paths = workspace
    out = root / f"out{next(_counter)}"
    argv = build_argv(command, choices, paths, out)
    own = Path(paths["run"]) if command == "evaluate" else out
    before = snapshot(root, own)
    monkeypatch.chdir(root)  # a relative path written by mistake would land here
    threads = torch.get_num_threads()
    capsys.readouterr()
    try:
        code = main(argv)
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert code in (0, 2), (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        lines = [
            line for line in err.splitlines() if line.startswith("attncourse: error: ")
        ]
        assert len(lines) == 1, (argv, err)
    assert snapshot(root, own) == before, (
        argv
    )  # nothing written outside the run's own folder


SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_extreme_option_values_exit_0_or_2_without_traceback(
    command, workspace, capsys, monkeypatch
):
    @SETTINGS
    @given(choices=drawn(command))
    def run(choices):
        with monkeypatch.context() as patch:
            check(command, choices, workspace, capsys, patch)

    run()
