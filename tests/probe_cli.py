"""Adversarial probe of the command line (counts of outcomes): run it, read the summary.

    ATTNCOURSE_RUNS=/tmp/runs .venv/bin/python tests/probe_cli.py [--ctrl-c N] [--quick]

Not a test (pytest collects test_*.py only): it takes minutes, and its numbers go into
the issue's closing note. It counts

* every numeric option of every sub-command x every extreme value of
  tests/cli/test_extremes.py, run in-process: accepted (exit 0), clean errors (exit 2,
  one line), tracebacks (anything else: an exception escaping ``main``, other codes,
  several lines), files written outside the run's own folder;
* the data-loss scenarios of items 1-2: a user's test.tsv under --overwrite and --resume,
  train-lm --resume/--overwrite onto a train run;
* Ctrl-C (SIGINT) at random moments of ``python -m attncourse train-lm`` (imports and
  checkpoint writes included): exit 130 with one line, or not;
* peak memory (max RSS of the child process) of items 3-5: a 51 MB one-line CJK text,
  a checkpoint asking for max_len 1e9, --max-tokens 1,000,000 on a 500k-token pair and a
  56k-character prompt.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT)]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from attncourse.cli.commands import main  # noqa: E402
from attncourse.train.runfiles import note_written  # noqa: E402
from tests.cli.test_extremes import (  # noqa: E402
    COMMANDS,
    EXTREMES,
    TINY_LM,
    TINY_RNN,
    build_argv,
    snapshot,
    write_data,
)


def run_main(argv: list[str]) -> tuple[int | str, str]:
    err, out = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code: int | str = main(argv)
    except BaseException as exc:  # noqa: BLE001 (a traceback, counted)
        code = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        torch.set_num_threads(threads)
    return code, err.getvalue()


def grid(root: Path, paths: dict[str, str], quick: bool) -> dict[str, object]:
    counts = {
        "inputs": 0,
        "accepted": 0,
        "clean_errors": 0,
        "tracebacks": 0,
        "outside_writes": 0,
    }
    bad = []
    n = 0
    for command, (_, options) in COMMANDS.items():
        for option in options:
            for value in EXTREMES[::3] if quick else EXTREMES:
                n += 1
                out = root / f"g{n}"
                argv = build_argv(command, [(option, value)], paths, out)
                own = Path(paths["run"]) if command == "evaluate" else out
                before = snapshot(root, own)
                os.chdir(root)
                code, err = run_main(argv)
                counts["inputs"] += 1
                lines = [
                    x for x in err.splitlines() if x.startswith("attncourse: error: ")
                ]
                if code == 0:
                    counts["accepted"] += 1
                elif code == 2 and len(lines) == 1 and "Traceback" not in err:
                    counts["clean_errors"] += 1
                else:
                    counts["tracebacks"] += 1
                    bad.append((command, option, value, code, err[-300:]))
                if snapshot(root, own) != before:
                    counts["outside_writes"] += 1
                    bad.append((command, option, value, "wrote outside", ""))
    counts["failures"] = bad[:20]
    return counts


def data_loss(root: Path, paths: dict[str, str]) -> dict[str, object]:
    """Items 1-2: True for each scenario in which a file no run wrote was replaced, or two runs mixed."""
    cases = {}
    d = root / "loss1"
    d.mkdir()
    (d / "test.tsv").write_text("mine\tx\n", encoding="utf-8")
    run_main(["train", *TINY_RNN, "--out", str(d), "--overwrite"])
    cases["train --overwrite onto a user's test.tsv"] = (
        d / "test.tsv"
    ).read_text() != "mine\tx\n"
    d = root / "loss2"
    run_main(["train", *TINY_RNN, "--out", str(d)])
    (d / "test.tsv").write_text("edited\tx\n", encoding="utf-8")
    run_main(["train", *TINY_RNN, "--out", str(d), "--epochs", "2", "--resume"])
    cases["train --resume rewrites an edited test.tsv"] = (
        d / "test.tsv"
    ).read_text() != "edited\tx\n"
    d = root / "loss3"
    run_main(["train", *TINY_RNN, "--out", str(d)])
    before = sorted(os.listdir(d))
    run_main(
        ["train-lm", "--text", paths["text"], *TINY_LM, "--out", str(d), "--resume"]
    )
    cases["train-lm --resume onto a train run writes into it"] = (
        sorted(os.listdir(d)) != before
    )
    run_main(
        ["train-lm", "--text", paths["text"], *TINY_LM, "--out", str(d), "--overwrite"]
    )
    cases["train-lm --overwrite leaves the train run's files mixed in"] = bool(
        {"best.pt", "results.json", "test.tsv"} & set(os.listdir(d))
    )
    return {"scenarios": len(cases), "data_loss": sum(cases.values()), "cases": cases}


def ctrl_c(root: Path, paths: dict[str, str], tries: int) -> dict[str, object]:
    rng = random.Random(0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    results = {
        "tries": tries,
        "clean": 0,
        "finished": 0,
        "other": 0,
        "leftover_tmp": 0,
        "examples": [],
    }
    for i in range(tries):
        out = root / f"int{i}"
        argv = [
            sys.executable,
            "-m",
            "attncourse",
            "train-lm",
            "--text",
            paths["text"],
            *TINY_LM[:1],
            "200",
            *TINY_LM[2:],
            "--out",
            str(out),
        ]
        # a shell's background job inherits SIGINT ignored: restore the default for the child
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler),
        )
        time.sleep(rng.uniform(0.2, 10.0))
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=120)
        except (
            subprocess.TimeoutExpired
        ):  # the interruption was lost: counted, then stopped
            proc.kill()
            _, err = proc.communicate()
            err = "no exit 120 s after Ctrl-C\n" + err
        if proc.returncode == 0:
            results["finished"] += 1
        elif proc.returncode == 130 and err.count("\n") == 1 and "Traceback" not in err:
            results["clean"] += 1
        else:
            results["other"] += 1
            results["examples"].append((proc.returncode, err[-300:]))
        if out.is_dir() and any(p.name.endswith(".tmp") for p in out.iterdir()):
            results["leftover_tmp"] += 1
    return results


def peak(argv: list[str]) -> tuple[int, float, str]:
    """(exit status, peak RSS in MB of the child, last stderr line).

    The peak is the child's VmHWM (its own high-water mark since exec), not
    ru_maxrss, which Linux carries over from the parent across fork and exec.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = (
        f"import runpy, sys; sys.argv = {['attncourse', *argv]!r}\n"
        "try:\n    runpy.run_module('attncourse', run_name='__main__')\n"
        "finally:\n"
        "    hwm = [x for x in open('/proc/self/status') if x.startswith('VmHWM')][0]\n"
        "    print('PEAK', hwm.split()[1], file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    lines = proc.stderr.splitlines()
    kb = int(next(x for x in lines if x.startswith("PEAK")).split()[1])
    last = [x for x in lines if not x.startswith("PEAK")]
    return proc.returncode, kb / 1024, (last[-1] if last else "")[:200]


def memory(root: Path, paths: dict[str, str]) -> dict[str, object]:
    cjk = root / "cjk.txt"
    codes = np.random.default_rng(0).integers(0x4E00, 0x4E00 + 3000, 17_000_000)
    cjk.write_bytes(codes.astype("<u4").tobytes().decode("utf-32-le").encode("utf-8"))
    bad = root / "badlm"
    run_main(["train-lm", "--text", paths["text"], *TINY_LM, "--out", str(bad)])
    data = torch.load(bad / "checkpoint.pt", weights_only=True)
    data["model_config"]["spec"]["max_len"] = 10**9
    torch.save(data, bad / "checkpoint.pt")
    note_written(bad / "checkpoint.pt")  # and its digest, as a forger would
    pair = root / "long.tsv"
    words = " ".join(["w"] * 500_000)
    pair.write_text(f"{words}\t{words}\n", encoding="utf-8")
    cases = {
        "3: train-lm --text 51 MB one-line CJK": [
            "train-lm",
            "--text",
            str(cjk),
            *TINY_LM[:1],
            "1",
            *TINY_LM[2:],
            "--out",
            str(root / "cjkrun"),
        ],
        "4: sample, checkpoint max_len 1e9": ["sample", str(bad)],
        "5: train --max-tokens 1,000,000, 500k-token pair": [
            "train",
            "--train",
            str(pair),
            "--valid",
            str(pair),
            "--model",
            "rnn",
            "--epochs",
            "1",
            "--max-tokens",
            "1000000",
            "--no-progress",
            "--out",
            str(root / "longrun"),
        ],
        "5: sample --prompt of 56k characters": [
            "sample",
            paths["lm"],
            "--prompt",
            "the " * 14_000,
        ],
    }
    return {
        name: dict(zip(("exit", "peak_MB", "stderr"), peak(argv)))
        for name, argv in cases.items()
    }


def main_probe() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ctrl-c", type=int, default=12, help="SIGINT tries (default 12)"
    )
    parser.add_argument(
        "--phases",
        default="grid,loss,ctrl-c,memory",
        help="comma-separated phases to run (default: all)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="every third extreme value only"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="attncourse-probe-"))
    paths = {k: str(v) for k, v in write_data(root).items()}
    assert run_main(["train", *TINY_RNN, "--out", paths["run"]])[0] == 0
    assert (
        run_main(["train-lm", "--text", paths["text"], *TINY_LM, "--out", paths["lm"]])[
            0
        ]
        == 0
    )
    report = {}
    start = time.perf_counter()
    phases = set(args.phases.split(","))
    if "grid" in phases:
        report["numeric_options"] = grid(root, paths, args.quick)
    if "loss" in phases:
        report["data_loss"] = data_loss(root, paths)
    if "ctrl-c" in phases:
        report["ctrl_c"] = ctrl_c(root, paths, args.ctrl_c)
    if "memory" in phases:
        report["memory"] = memory(root, paths)
    report["seconds"] = round(time.perf_counter() - start)
    report["self_peak_MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main_probe()
