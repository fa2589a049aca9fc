"""The command line on bad inputs and faults: no data loss, no traceback, stated limits, kept history.

One test (or parametrized group) per item of the issue "Command line: no data loss, no
traceback, bounded memory on any input"; every error is one line naming the option, exit 2.
No user file replaced even with --overwrite, no traceback from any option value, memory
bounded for train-lm and sample: tests/cli/test_overwrite_and_memory.py, and its
property test over every numeric option in tests/cli/test_extremes.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attncourse.cli.commands as cli
import attncourse.cli.train_evaluate as train_evaluate
from attncourse.cli.commands import main
from attncourse.data.batching import build_vocabs, make_batches
from attncourse.data.pairs import PairDataset
from attncourse.train.fit import FitConfig, fit
from attncourse.train.runfiles import note_written
from attncourse.train.seq2seq import evaluate
from tests.cli.test_commands import (  # noqa: F401 (tsv: the fixture)
    SMALL,
    one_error_line,
    train_args,
    tsv,
)

TASK = ["--task", "numbers-en-fr", "--n-train", "40", "--n-valid", "8", "--n-test", "8", "--max-value", "100",
        "--model", "rnn", "--epochs", "1", *SMALL]


@pytest.fixture
def run(tsv, tmp_path):
    """A finished one-epoch run."""
    out = tmp_path / "run"
    assert main(train_args(tsv, out, epochs=1)) == 0
    return out


# --- 1. a run directory is never overwritten unasked ------------------------------------------


def test_non_empty_out_that_is_no_run_is_refused(tmp_path, capsys):
    out = tmp_path / "d"
    out.mkdir()
    (out / "test.tsv").write_text("mine\tx\n", encoding="utf-8")
    assert main(["train", *TASK, "--out", str(out)]) == 2
    line = one_error_line(capsys)
    # a folder of other things is no run folder: no --overwrite offered
    assert "test.tsv" in line and "a folder of its own" in line and "not empty" in line
    assert (out / "test.tsv").read_text(encoding="utf-8") == "mine\tx\n"
    assert sorted(os.listdir(out)) == ["test.tsv"]
    # --overwrite never replaces a file no run wrote: it stops and names it
    assert main(["train", *TASK, "--out", str(out), "--overwrite"]) == 2
    line = one_error_line(capsys)
    assert "none of its files (test.tsv) is deleted" in line
    assert (out / "test.tsv").read_text(encoding="utf-8") == "mine\tx\n"
    assert sorted(os.listdir(out)) == ["test.tsv"]


def test_run_without_checkpoint_is_refused(run, tsv, capsys):
    (run / "checkpoint.pt").unlink()
    best, results = (run / "best.pt").read_bytes(), (run / "results.json").read_bytes()
    capsys.readouterr()
    assert main(train_args(tsv, run, epochs=1)) == 2
    line = one_error_line(capsys)
    assert "no checkpoint.pt" in line and "best.pt" in line and "results.json" in line and "--overwrite" in line
    assert (run / "best.pt").read_bytes() == best and (run / "results.json").read_bytes() == results
    assert main([*train_args(tsv, run, epochs=1), "--overwrite"]) == 0
    assert (run / "checkpoint.pt").is_file()


@pytest.mark.parametrize("args, option", [
    (["--out", ""], "--out"),
    (["--out", "  "], "--out"),
    (["--out", "x", "--resume", "--overwrite"], "--overwrite"),
])
def test_empty_out_and_contradictory_options_are_refused(args, option, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *TASK, *args]) == 2
    assert option in one_error_line(capsys)
    assert os.listdir(tmp_path) == []  # nothing written into the current directory


# --- 2. devices are checked before any work, and named ---------------------------------------


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "meta", "xla", "cpu:5", ""])
@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_bad_device_is_one_line_naming_the_option(command, device, tmp_path, capsys):
    args = ["train", *TASK, "--out", str(tmp_path / "r")] if command == "train" else [
        "evaluate", str(tmp_path), "--test", str(tmp_path / "t.tsv")]
    assert main([*args, "--device", device]) == 2
    line = one_error_line(capsys)
    assert "--device" in line and "checkpoint" not in line and "Expected one of" not in line
    assert not (tmp_path / "r").exists()


# --- 3. lengths: the model's limit is stated, decoding stops at the model's positions ------------


def tiny_transformer(src_vocab, tgt_vocab, max_len):
    from attncourse.nn.transformer import Transformer

    torch.manual_seed(0)
    return Transformer(len(src_vocab), len(tgt_vocab), d_model=16, num_heads=2, num_encoder_layers=1,
                       num_decoder_layers=1, d_ff=32, dropout=0.0, max_len=max_len)


def test_decoding_is_capped_at_the_model_positions():
    pytest.importorskip("attncourse.nn.transformer")
    long_target = tuple("ab" * 20)  # 40 tokens: 2 * 40 + 5 steps would need 85 positions
    data = PairDataset(((("a", "b"), ("a", "b")), (("b",), long_target)), level="char")
    src_vocab, tgt_vocab = build_vocabs(data)
    model = tiny_transformer(src_vocab, tgt_vocab, max_len=12)
    for beam_size in (1, 2):
        result = evaluate(model, data, src_vocab, tgt_vocab, beam_size=beam_size)
        assert result["metrics"]["overall"]["count"] == 2
        assert all(len(h) <= 12 for h in result["hypotheses"])  # cut at the cap, scored as it is


def test_validation_fits_targets_as_long_as_the_model_takes():
    pytest.importorskip("attncourse.nn.transformer")
    # targets of max_len - 1 tokens: teacher forcing fits, greedy validation must stop at max_len
    data = PairDataset(tuple(((c, "x"), tuple(c * 7)) for c in "abcd"), level="char")
    src_vocab, tgt_vocab = build_vocabs(data)
    model = tiny_transformer(src_vocab, tgt_vocab, max_len=8)
    batches = make_batches(data, src_vocab, tgt_vocab, 4, shuffle=False)
    result = fit(model, batches, batches, FitConfig(epochs=1, batch_size=4, device="cpu"), progress=False)
    assert len(result.history) == 1


def test_transformer_length_limit_is_stated(tsv, tmp_path, capsys):
    pytest.importorskip("attncourse.nn.transformer")
    long = tmp_path / "long.tsv"
    long.write_text("one two\ttwo one\n" + " ".join(["one"] * 600) + "\tone\n", encoding="utf-8")
    args = ["train", "--train", str(long), "--valid", str(tsv["valid"]), "--out", str(tmp_path / "tf"),
            "--no-progress", "--model", "transformer", "--d-model", "16", "--heads", "2", "--layers", "1"]
    assert main([*args, "--max-tokens", "1000"]) == 2
    line = one_error_line(capsys)
    assert "long.tsv, line 2" in line and "600" in line and "511" in line and "positions" in line
    assert "--too-long skip" in line and "larger max_len" not in line
    assert not (tmp_path / "tf").exists()


# --- 5. memory: lines above the token limit are reported, not loaded --------------------------


def test_long_line_is_refused_or_skipped(tsv, tmp_path, capsys):
    huge = tmp_path / "huge.tsv"
    huge.write_text(tsv["train"].read_text(encoding="utf-8") + " ".join(["two"] * 5000) + "\tone\n",
                    encoding="utf-8")
    args = ["train", "--train", str(huge), "--valid", str(tsv["valid"]), "--out", str(tmp_path / "r"),
            "--epochs", "1", *SMALL]
    assert main(args) == 2
    line = one_error_line(capsys)
    assert "huge.tsv, line 49" in line and "5,000" in line and "--max-tokens 256" in line
    assert main([*args, "--too-long", "skip"]) == 0
    out = capsys.readouterr().out
    assert "left out 1 pair(s)" in out and "line(s) 49" in out
    assert json.loads((tmp_path / "r" / "config.json").read_text())["n_pairs"]["train"] == 48
    assert main(["train", *TASK, "--out", str(tmp_path / "t"), "--max-tokens", "5"]) == 2
    assert "--max-tokens applies to TSV files" in one_error_line(capsys)


# --- 4. results.json keeps its history --------------------------------------------------------


def test_results_keep_evaluations_and_every_segment(run, tsv, tmp_path, capsys, monkeypatch):
    assert main(["evaluate", str(run), "--test", str(tsv["test"])]) == 0
    first = json.loads((run / "results.json").read_text())
    epoch_tokens = first["train_tokens"]
    assert epoch_tokens > 0 and len(first["segments"]) == 1 and len(first["evaluations"]) == 1

    # a segment killed after epoch 2's checkpoint (Ctrl-C: exit 130), then resumed to epoch 3
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_evaluate.tqdm, "write", interrupt)
    assert main([*train_args(tsv, run, epochs=3), "--resume"]) == 130
    monkeypatch.undo()
    assert main([*train_args(tsv, run, epochs=3), "--resume"]) == 0
    results = json.loads((run / "results.json").read_text())
    assert [(s["first_epoch"], s["last_epoch"]) for s in results["segments"]] == [(1, 1), (2, 2), (3, 3)]
    assert results["train_tokens"] == 3 * epoch_tokens
    assert results["wall_time"] == pytest.approx(sum(s["wall_time"] for s in results["segments"]))
    assert results["wall_time"] > first["wall_time"]
    assert results["evaluations"] == first["evaluations"]
    assert [row["epoch"] for row in results["history"]] == [1, 2, 3]

    capsys.readouterr()
    assert main([*train_args(tsv, run, epochs=3), "--resume"]) == 0  # a finished run: nothing to train
    assert "nothing to train" in capsys.readouterr().out
    again = json.loads((run / "results.json").read_text())
    assert again["tokens_per_second"] == results["tokens_per_second"] > 0
    assert again["segments"] == results["segments"] and again["evaluations"] == results["evaluations"]


# --- 6. temporary files of a killed write are removed on the next start ------------------------


def test_leftover_temporaries_are_removed_on_resume(run, tsv, capsys):
    leftovers = [run / ".checkpoint.pt.k1ll3d_x.tmp", run / ".best.pt.abcdefgh.tmp", run / ".results.json.q_q_q_q_.tmp"]
    for path in leftovers:
        path.write_bytes(b"partial")
    (run / ".keep.tmp").write_bytes(b"not ours")
    assert main([*train_args(tsv, run, epochs=2), "--resume"]) == 0
    assert not any(path.exists() for path in leftovers)
    assert (run / ".keep.tmp").exists()
    assert "removed 3 temporary file(s)" in capsys.readouterr().out


def test_a_directory_holding_only_temporaries_counts_as_empty(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / ".checkpoint.pt.abcdefgh.tmp").write_bytes(b"partial")
    assert main(["train", *TASK, "--out", str(out)]) == 0
    assert not (out / ".checkpoint.pt.abcdefgh.tmp").exists()


# --- 7. messages that name the option and say what is wrong ------------------------------------


@pytest.mark.parametrize("args, option", [
    (["--data-seed", "-1"], "--data-seed"),
    (["--seed", str(2**70)], "--seed"),
    (["--seed", "1.5"], "--seed"),
])
def test_bad_seed_names_the_option(args, option, tmp_path, capsys):
    assert main(["train", *TASK, "--out", str(tmp_path / "r"), *args]) == 2
    line = one_error_line(capsys)
    assert f"argument {option}:" in line and "Overflow" not in line


def test_refused_pickle_and_random_bytes_say_what_they_are(run, tsv, capsys):
    best = run / "best.pt"
    torch.save({"format": "attncourse-checkpoint", "value": os.system}, best)  # a function: refused
    note_written(best)  # recorded, as a forger would: the loader's own reasons are tested
    assert main(["evaluate", str(run), "--test", str(tsv["test"])]) == 2
    line = one_error_line(capsys)
    assert "holds Python objects" in line and "weights_only" not in line and "system" in line
    best.write_bytes(bytes(range(256)) * 8)
    note_written(best)
    assert main(["evaluate", str(run), "--test", str(tsv["test"])]) == 2
    line = one_error_line(capsys)
    assert "not a file written by torch.save" in line and "Python objects" not in line
    best.write_bytes(b"")
    note_written(best)
    assert main(["evaluate", str(run), "--test", str(tsv["test"])]) == 2
    assert "empty or cut short" in one_error_line(capsys)


def test_cr_only_line_ends_and_directories_are_named(tsv, tmp_path, capsys):
    mac = tmp_path / "mac.tsv"
    mac.write_bytes(b"one two\ttwo one\r" * 20)
    assert main(train_args({**tsv, "train": mac}, tmp_path / "r")) == 2
    line = one_error_line(capsys)
    assert "mac.tsv, line 1" in line and "carriage return" in line and "TABs" not in line
    assert main(train_args({**tsv, "train": tmp_path}, tmp_path / "r")) == 2
    line = one_error_line(capsys)
    assert "--train" in line and "is a directory" in line and "no such file" not in line
    assert main(["evaluate", str(tmp_path / "no-run"), "--test", str(tsv["test"])]) == 2
    assert "no such directory" in one_error_line(capsys)


def test_evaluate_checks_every_output_before_decoding(run, tsv, tmp_path, capsys):
    results = (run / "results.json").read_bytes()
    assert main(["evaluate", str(run), "--test", str(tsv["test"]), "--predictions", str(tmp_path)]) == 2
    line = one_error_line(capsys)
    assert "--predictions" in line and "is a directory" in line
    assert not (run / "metrics.json").exists() and (run / "results.json").read_bytes() == results
    assert main(["evaluate", str(run), "--test", str(tsv["test"]), "--json", str(tmp_path / "no" / "m.json")]) == 2
    line = one_error_line(capsys)
    assert "--json" in line and "no directory" in line and ".tmp" not in line
    assert main(["evaluate", str(run), "--test", str(tsv["test"]), "--length-penalty", "-1"]) == 2
    assert "--length-penalty" in one_error_line(capsys)


def test_failed_write_names_the_file_not_its_temporary(tmp_path):
    from attncourse.train.checkpoint import atomic_write_text

    target = tmp_path / "missing" / "metrics.json"
    with pytest.raises(OSError) as info:
        atomic_write_text("{}", target)
    assert str(target) in str(info.value) and ".tmp" not in str(info.value)
    assert "Errno" not in str(info.value)


def test_no_traceback_through_python_m(tmp_path):
    """The same checks through the real entry point, as a learner runs it."""
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).parents[2]) + os.pathsep
           + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "attncourse", "train", "--task", "dates", "--out", str(tmp_path),
                           "--device", "cuda:x"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("attncourse: error: argument --device:")
