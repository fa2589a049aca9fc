"""The command line on forged files: forged checkpoints and run files refused before use,
logits checked, Ctrl-C always 130, and smaller faults.

Run folders owned by content: tests/cli/test_run_folders.py.
"""

# ruff: noqa: F811 (the fixtures tsv and text_file: imported, then parameters)
from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attncourse.cli.commands import main
from attncourse.course.cli import main as edition_main
from attncourse.train.checkpoint import load_checkpoint
from attncourse.train.runfiles import note_written, validate_run_digest
from tests.cli.test_commands import one_error_line, tsv  # noqa: F401 (tsv: the fixture)
from tests.cli.test_lm import SMALL as LM_SMALL
from tests.cli.test_lm import text_file  # noqa: F401 (the fixture)
from tests.cli.test_outputs_and_paths import (  # noqa: F401 (fixtures)
    ROOT,
    end,
    lm_run,
    run,
    sigint_at_its_default,
)


def forge(path: Path, change) -> None:
    """Rewrite checkpoint ``path`` with ``change(data)`` applied, and record its new digest as a
    forger who also edits the manifest would: the checks after the digest's are what is tested."""
    data = torch.load(path, weights_only=True)
    data = change(data) or data
    torch.save(data, path)
    note_written(path)


def first_float(data) -> str:
    return next(k for k, v in data["model_state"].items() if v.is_floating_point())


def lm_resume(out: Path, text: Path) -> list[str]:
    steps = LM_SMALL.index("--steps")
    return ["train-lm", "--text", str(text), "--out", str(out), *LM_SMALL[:steps], "--steps", "60",
            *LM_SMALL[steps + 2:], "--resume"]


def set_entry(key, value):
    return lambda d: d.__setitem__(key, value)


def set_weight(make):
    def change(d):
        name = first_float(d)
        d["model_state"][name] = make(d["model_state"][name])
    return change


NOT_READABLE = "is not a readable attncourse checkpoint: "
# (forgery, what the error line ends with); every command that loads the checkpoint says it
FORGERIES = {
    "model_state a list": (lambda d: d.__setitem__("model_state", list(d["model_state"].values())),
                           "its 'model_state' is list"),
    "extra None": (set_entry("extra", None), "its 'extra' is None, not a dict"),
    "an extra key": (set_entry("surprise", 1), "it holds entries no checkpoint has (surprise)"),
    "sparse": (set_weight(lambda t: t.to_sparse()), "is a sparse_coo tensor (sparse), not a dense one"),
    "meta": (set_weight(lambda t: torch.empty(t.shape, device="meta")),
             "is a 'meta' tensor, which has a shape but no values"),
    "expanded": (set_weight(lambda t: torch.zeros(1).expand(100_000, 100_000)),
                 "is an expanded tensor (100000 x 100000) whose values the file does not hold (its storage "
                 "is smaller than its shape)"),
    "model_class a list": (set_entry("model_class", ["GPT"]), "its 'model_class' is list ['GPT'], not a "
                                                              "string or None"),
    "model_config a list": (set_entry("model_config", [1, 2]), "its 'model_config' is list [1, 2], not a "
                                                               "dict or None"),
}


# --- 3. a forged checkpoint: one line, on every command that loads it --------------------------


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_lm_checkpoint_is_refused_by_resume_and_sample(lm_run, text_file, capsys, forgery):
    change, ending = FORGERIES[forgery]
    forge(lm_run / "checkpoint.pt", change)
    before = (lm_run / "checkpoint.pt").read_bytes()
    for argv in (lm_resume(lm_run, text_file), ["sample", str(lm_run), "--length", "5", "--prompt", "h"]):
        capsys.readouterr()
        assert main(argv) == 2, argv
        line = one_error_line(capsys)
        assert line.startswith(f"attncourse: error: {lm_run / 'checkpoint.pt'} {NOT_READABLE}"), line
        assert ending in line, line
    assert (lm_run / "checkpoint.pt").read_bytes() == before  # nothing resumed, nothing written


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_seq2seq_checkpoint_is_refused_by_resume_and_evaluate(run, tsv, capsys, forgery):
    change, ending = FORGERIES[forgery]
    for name in ("checkpoint.pt", "best.pt"):
        forge(run / name, change)
    resume = ["train", "--train", str(tsv["train"]), "--valid", str(tsv["valid"]), "--out", str(run),
              "--epochs", "2", "--emb-dim", "8", "--hidden-dim", "16", "--batch-size", "16", "--lr", "0.01",
              "--no-progress", "--resume"]
    for argv, name in ((resume, "checkpoint.pt"), (["evaluate", str(run), "--test", str(tsv["test"])], "best.pt")):
        capsys.readouterr()
        assert main(argv) == 2, argv
        line = one_error_line(capsys)
        assert line.startswith(f"attncourse: error: {run / name} {NOT_READABLE}") and ending in line, line


@pytest.mark.parametrize("cls", ["Bogus", "Seq2Seq"])
def test_resume_refuses_another_model_class(lm_run, text_file, capsys, cls):
    forge(lm_run / "checkpoint.pt", set_entry("model_class", cls))
    assert main(lm_resume(lm_run, text_file)) == 2
    assert one_error_line(capsys) == (
        f"attncourse: error: checkpoint {lm_run / 'checkpoint.pt'} does not match this run: model class: "
        f"{cls} in the checkpoint, GPT here")


def test_resume_refuses_weights_of_another_dtype_or_an_extra_weight(lm_run, text_file, capsys):
    forge(lm_run / "checkpoint.pt", set_weight(lambda t: t.to(torch.int64)))
    assert main(lm_resume(lm_run, text_file)) == 2
    assert one_error_line(capsys).endswith("does not match this run: parameter embedding.weight: int64 in the "
                                           "checkpoint, float32 in this run")
    forge(lm_run / "checkpoint.pt", lambda d: d["model_state"].__setitem__("extra.weight", torch.zeros(2)))
    assert main(lm_resume(lm_run, text_file)) == 2
    assert "parameter extra.weight: (2,) in the checkpoint, absent in this run" in one_error_line(capsys)


# --- 4. finite but huge weights; a spec's numbers held to the options' ranges ------------------


@pytest.mark.parametrize("extra", [[], ["--rope-scaling", "ntk", "--rope-factor", "2"], ["--draft", "SELF"]])
def test_huge_finite_weights_are_named_not_a_torch_error(lm_run, capsys, extra):
    def huge(d):
        for tensor in d["model_state"].values():
            if tensor.is_floating_point():
                tensor.fill_(1e38)
    forge(lm_run / "checkpoint.pt", huge)
    extra = [str(lm_run) if e == "SELF" else e for e in extra]
    assert main(["sample", str(lm_run), "--length", "5", "--prompt", "h", *extra]) == 2
    assert one_error_line(capsys) == (
        f"attncourse: error: {lm_run / 'checkpoint.pt'} is broken: its weights are finite, but the model's "
        "outputs (logits) overflow to infinite or NaN values; a training that diverged, or a damaged file")


@pytest.fixture
def spec_run(tmp_path, text_file):
    out = tmp_path / "gated"  # --gate: a model built from a spec (model_config {"spec": {...}})
    assert main(["train-lm", "--text", str(text_file), "--out", str(out), *LM_SMALL, "--attention", "gated"]) == 0
    return out


@pytest.mark.parametrize("part, key, value, message", [
    ("positions", "rope_factor", float("inf"), "its model spec's positions has rope_factor = float inf, not of "
                                               "its type (a finite number)"),
    ("positions", "rope_factor", "2", "its model spec's positions has rope_factor = str '2', not of its type "
                                      "(a finite number)"),
    ("positions", "rope_factor", 2000.0, "asks for a model with rope_factor 2000, which must be at least 1 and "
                                         "at most 1,024"),
    ("positions", "rope_factor", 1e308, "asks for a model with rope_factor 1e+308, which must be at least 1"),
    ("positions", "original_len", 10**12, "asks for a model with original_len 1e+12, which must be at least 1 "
                                          "and at most 8,192"),
    ("positions", "base", float("inf"), "its model spec's positions has base = float inf"),
    ("positions", "base", 1e30, "asks for a model with base 1e+30, which must be above 1 and at most "
                                "1,000,000,000"),
    ("norm", "eps", float("inf"), "its model spec's norm has eps = float inf"),
    ("norm", "eps", 5.0, "asks for a model with eps 5, which must be above 0 and at most 1"),
])
def test_a_forged_spec_is_refused_on_load(spec_run, capsys, part, key, value, message):
    def change(d):
        options = d["model_config"]["spec"][part]
        if part == "positions" and key != "base":
            options.update(rope_scaling="yarn", rope_factor=2.0, original_len=16)
        options[key] = value
    forge(spec_run / "checkpoint.pt", change)
    assert main(["sample", str(spec_run), "--length", "5", "--prompt", "h"]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"attncourse: error: {spec_run / 'checkpoint.pt'} ") and message in line, line


# --- 5. every field's type and range, on load ----------------------------------------------------


def test_a_seq2seq_config_of_the_wrong_type_is_refused(run, tsv, capsys):
    forge(run / "best.pt", lambda d: d["model_config"].__setitem__("bidirectional", "x"))
    assert main(["evaluate", str(run), "--test", str(tsv["test"])]) == 2
    assert one_error_line(capsys) == (
        f"attncourse: error: {run / 'best.pt'} {NOT_READABLE}its model config has bidirectional = str 'x', not "
        "of its type (bool)")


def test_a_deeply_nested_results_json_is_left_alone(run, tsv, capsys):
    nested = '{"a":' * 100_000 + "1" + "}" * 100_000
    (run / "results.json").write_text(nested)
    assert main(["evaluate", str(run), "--test", str(tsv["test"]), "--json", "-"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert (run / "results.json").read_text() == nested


@pytest.mark.parametrize("context", [99999999999999999999, 0, 1.5, "16", True])
def test_a_context_out_of_range_is_one_line(lm_run, capsys, context):
    config = json.loads((lm_run / "config.json").read_text())
    config["context"] = context
    (lm_run / "config.json").write_text(json.dumps(config))
    assert main(["sample", str(lm_run), "--rope-scaling", "ntk", "--rope-factor", "2", "--length", "5",
                 "--prompt", "h"]) == 2
    assert one_error_line(capsys) == (
        f"attncourse: error: {lm_run / 'config.json'}: 'context' must be a whole number from 1 to 8,192 (the "
        f"range of --context), got {context!r}")


# --- 8. Ctrl-C at any moment of a Transformer's training: 130, one line, resumable -------------


@pytest.mark.parametrize("moment", ["config", "temporary", "checkpoint"])
def test_sigint_during_transformer_training_exits_130(tmp_path, tsv, moment, sigint_at_its_default):
    out = tmp_path / "tf"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "attncourse", "train", "--train", str(tsv["train"]), "--valid",
         str(tsv["valid"]), "--out", str(out), "--model", "transformer", "--epochs", "1000", "--d-model", "16",
         "--heads", "2", "--layers", "1", "--d-ff", "32", "--batch-size", "16"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = {"config": lambda: (out / "config.json").exists(),
                "temporary": lambda: glob.glob(str(out / ".checkpoint.pt.*.tmp")),
                "checkpoint": lambda: (out / "checkpoint.pt").exists()}[moment]
        deadline = time.time() + 120
        while not seen() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.001)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        err = proc.stderr.read()
        assert "Traceback" not in err and "abort" not in err
        assert [line for line in err.splitlines() if line.startswith("attncourse:")][-1].startswith(
            "attncourse: interrupted")
        if (out / "checkpoint.pt").exists():  # whole, and as recorded: --resume can continue it
            validate_run_digest(out / "checkpoint.pt")
            assert load_checkpoint(out / "checkpoint.pt")["epoch"] >= 1
    finally:
        end(proc)  # 1,000 epochs: never left running


# --- 9. the smaller items -------------------------------------------------------------------------


def test_an_output_ending_in_a_separator_is_a_folder(run, tsv, capsys):
    for option in ("--json", "--predictions"):
        assert main(["evaluate", str(run), "--test", str(tsv["test"]), option, f"{run}/new/"]) == 2
        assert one_error_line(capsys) == (
            f"attncourse: error: argument {option}: expected a file name, got '{run}/new/' (a path ending in "
            "'/' names a folder) (see 'attncourse evaluate --help')")
    assert not (run / "new").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("special", ["fifo", "/dev/null"])
def test_a_special_input_is_not_a_regular_file(run, tsv, tmp_path, capsys, special):
    path = Path(special)
    if special == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    for command, argv in (
            ("train-lm", ["train-lm", "--text", str(path), "--out", str(tmp_path / "o")]),
            ("evaluate", ["evaluate", str(run), "--test", str(path)]),
            ("train", ["train", "--train", str(path), "--valid", str(tsv["valid"]), "--out", str(tmp_path / "o")])):
        assert main(argv) == 2
        option = {"train-lm": "--text", "evaluate": "--test", "train": "--train"}[command]
        assert one_error_line(capsys) == (
            f"attncourse: error: {option} '{path}' is not a regular file (a FIFO, a device or a socket); give a "
            f"file (see 'attncourse {command} --help')")


def test_student_edition_names_the_file_and_says_why(tmp_path, capsys):
    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    (notebooks / "01_x.md").write_bytes(b"# Title\n\xff\xfe\n")
    assert edition_main(["--notebooks", str(notebooks), str(tmp_path / "out")]) == 2
    assert one_error_line(capsys) == (f"attncourse: error: {notebooks / '01_x.md'} is not UTF-8 text (invalid "
                                      "start byte at byte 8); save it as UTF-8")
    (notebooks / "01_x.md").write_text("# Title\n\nText.\n")
    (tmp_path / "afile").write_text("")
    assert edition_main(["--notebooks", str(notebooks), str(tmp_path / "afile" / "out")]) == 2
    line = one_error_line(capsys)
    assert line.endswith("a name on its path is a file, not a folder") and "Errno" not in line, line
    assert edition_main(["--notebooks", str(notebooks), str(tmp_path / ("a" * 300))]) == 2
    line = one_error_line(capsys)
    assert line.endswith("File name too long (a name has at most 255 bytes, a path at most 4,096)")
    assert "Errno" not in line


def test_gpu_report_under_a_file_says_so(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "sub" / "out"
    assert main(["gpu-report", "--smoke", "--device", "cpu", str(out)]) == 2
    assert one_error_line(capsys) == (
        f"attncourse: error: OUT '{out}': '{tmp_path / 'afile'}' on its path is a file, not a folder "
        "(see 'attncourse gpu-report --help')")


@pytest.mark.parametrize("name", ["checkpoint.pt", "best.pt"])
def test_flipped_bytes_in_a_checkpoint_are_found(run, tsv, capsys, name):
    data = bytearray((run / name).read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    (run / name).write_bytes(bytes(data))
    argv = (["evaluate", str(run), "--test", str(tsv["test"])] if name == "best.pt" else
            ["train", "--train", str(tsv["train"]), "--valid", str(tsv["valid"]), "--out", str(run), "--epochs",
             "2", "--emb-dim", "8", "--hidden-dim", "16", "--batch-size", "16", "--lr", "0.01", "--no-progress",
             "--resume"])
    assert main(argv) == 2
    assert one_error_line(capsys) == (
        f"attncourse: error: {run / name} changed since it was written (digest mismatch): its SHA-256 is not "
        "the one .attncourse-run.json recorded; a damaged or edited file")


@pytest.mark.parametrize("option, value, what", [
    ("--epochs", "\u0665", "a whole number"),  # Arabic-Indic five
    ("--epochs", "\uff15", "a whole number"),  # fullwidth five
    ("--lr", "0.\u0661", "a number"),
])
def test_numbers_are_ascii_digits_only(tsv, tmp_path, capsys, option, value, what):
    argv = ["train", "--train", str(tsv["train"]), "--valid", str(tsv["valid"]), "--out", str(tmp_path / "o"),
            option, value]
    assert main(argv) == 2
    assert one_error_line(capsys) == (
        f"attncourse: error: argument {option}: expected {what} in ASCII digits (0-9), got '{value}' "
        "(see 'attncourse train --help')")
    assert not (tmp_path / "o").exists()


def test_a_run_file_nested_too_deeply_is_a_one_line_error(tmp_path):
    """The hostile run's one traceback: a vocab.json of 100,000 nested lists."""
    from attncourse.cli.lm import _read_vocab
    from attncourse.train.runfiles import read_run_json
    deep = tmp_path / "vocab.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        read_run_json(deep)
    with pytest.raises(ValueError, match="is not a vocabulary written by train-lm"):
        _read_vocab(deep)
