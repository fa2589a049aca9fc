"""Tests for the command line: python -m attncourse train / evaluate (attncourse.cli.commands)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attncourse.cli.commands as cli
from attncourse.cli.commands import build_parser, main

SMALL = ["--emb-dim", "8", "--hidden-dim", "16", "--batch-size", "16", "--lr", "0.01", "--no-progress"]

WORDS = ["one", "two", "three", "four", "five", "six"]


def write_tsv(path: Path, n: int, offset: int = 0) -> Path:
    """Pairs 'w1 w2 w3' -> 'w3 w2 w1' (reversal), deterministic."""
    lines = []
    for i in range(n):
        k = 1 + (i + offset) % 4
        src = [WORDS[(i * 7 + j * 3 + offset) % len(WORDS)] for j in range(k)]
        lines.append(" ".join(src) + "\t" + " ".join(reversed(src)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def tsv(tmp_path):
    return {
        "train": write_tsv(tmp_path / "train.tsv", 48),
        "valid": write_tsv(tmp_path / "valid.tsv", 12, offset=1),
        "test": write_tsv(tmp_path / "test.tsv", 12, offset=2),
    }


def train_args(tsv, out, epochs=2):
    return ["train", "--train", str(tsv["train"]), "--valid", str(tsv["valid"]), "--out", str(out),
            "--epochs", str(epochs), *SMALL]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("attncourse: error: ")
    assert "Traceback" not in err
    return lines[0]


def test_train_then_evaluate_end_to_end(tsv, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_args(tsv, out)) == 0
    for name in ("checkpoint.pt", "best.pt", "config.json", "history.json"):
        assert (out / name).is_file(), name
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]
    history = json.loads((out / "history.json").read_text())
    assert [row["epoch"] for row in history] == [1, 2]
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["attention"] == "bahdanau" and config["model"]["hidden_dim"] == 16
    stdout = capsys.readouterr().out
    assert "epoch   2" in stdout and "best epoch" in stdout

    assert main(["evaluate", str(out), "--test", str(tsv["test"]), "--predictions", str(tmp_path / "p.tsv")]) == 0
    stdout = capsys.readouterr().out
    assert "overall" in stdout and "exact" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["overall"]["count"] == 12
    assert metrics["buckets"] and sum(row["count"] for row in metrics["buckets"].values()) == 12
    assert set(metrics["overall"]) == {"count", "exact_match", "token_accuracy", "bleu", "chrf"}
    predictions = (tmp_path / "p.tsv").read_text(encoding="utf-8").splitlines()
    assert len(predictions) == 12 and all(line.count("\t") == 2 for line in predictions)

    json_out = tmp_path / "beam.json"
    assert main(["evaluate", str(out), "--test", str(tsv["test"]), "--beam-size", "2", "--json", str(json_out),
                 "--edges", "1", "3"]) == 0
    assert set(json.loads(json_out.read_text())["buckets"]) == {"1-2", "3+"}

    results = json.loads((out / "results.json").read_text())
    assert results["model"] == "bahdanau" and results["model_type"] == "rnn" and results["preset"] is None
    assert results["n_parameters"] == config["n_parameters"] and results["device"] == "cpu"
    assert results["torch_version"] == torch.__version__
    assert results["git_commit"] is None or len(results["git_commit"]) == 40
    assert results["tokens_per_second"] > 0 and results["wall_time"] > 0
    assert [row["epoch"] for row in results["history"]] == [1, 2]
    # evaluate added its test scores, once per (test file, decoding)
    evaluations = results["evaluations"]
    assert [e["beam_size"] for e in evaluations] == [1, 2]
    assert evaluations[0]["overall"] == metrics["overall"]


def test_resume_continues_and_a_finished_run_is_not_overwritten(tsv, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_args(tsv, out, epochs=1)) == 0
    assert main(train_args(tsv, out, epochs=2)) == 2
    assert "--resume" in one_error_line(capsys)
    assert main([*train_args(tsv, out, epochs=2), "--resume"]) == 0
    assert len(json.loads((out / "history.json").read_text())) == 2
    capsys.readouterr()
    assert main([*train_args(tsv, out, epochs=3), "--resume", "--hidden-dim", "12"]) == 2
    assert "hidden_dim: 16 in the checkpoint, 12 in this run" in one_error_line(capsys)
    assert json.loads((out / "config.json").read_text())["model"]["hidden_dim"] == 16  # left untouched


def test_generated_task_writes_test_tsv(tmp_path, capsys):
    out = tmp_path / "numbers"
    args = ["train", "--task", "numbers-en-de", "--n-train", "40", "--n-valid", "8", "--n-test", "8",
            "--max-value", "1000", "--model", "rnn", "--epochs", "1", "--out", str(out), *SMALL]
    assert main(args) == 0
    lines = (out / "test.tsv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 8 and all("\t" in line for line in lines)
    assert json.loads((out / "config.json").read_text())["model"]["attention"] is None
    assert main(["evaluate", str(out), "--test", str(out / "test.tsv")]) == 0


def test_help_via_subprocess():
    proc = subprocess.run([sys.executable, "-m", "attncourse", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "train" in proc.stdout and "evaluate" in proc.stdout


def test_every_option_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"
    assert main(["train", "--help"]) == 0


def test_malformed_tsv_line_is_one_error_line(tsv, tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("one two\ttwo one\nthree\tthree\nno tab here\n", encoding="utf-8")
    assert main(["train", "--train", str(bad), "--valid", str(tsv["valid"]), "--out", str(tmp_path / "r"),
                 *SMALL]) == 2
    line = one_error_line(capsys)
    assert f"{bad}, line 3" in line and "TAB" in line


def test_missing_file_is_one_error_line(tsv, tmp_path, capsys):
    missing = tmp_path / "nope.tsv"
    assert main(["train", "--train", str(missing), "--valid", str(tsv["valid"]), "--out", str(tmp_path / "r"),
                 *SMALL]) == 2
    assert "nope.tsv" in one_error_line(capsys)
    assert main(["evaluate", str(tmp_path / "no-run"), "--test", str(tsv["test"])]) == 2
    assert "best.pt" in one_error_line(capsys)


def test_unreadable_checkpoint_is_one_error_line(tsv, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "best.pt").write_bytes(b"\x00garbage" * 100)
    assert main(["evaluate", str(run), "--test", str(tsv["test"])]) == 2
    assert "is not a readable attncourse checkpoint" in one_error_line(capsys)
    torch.save({"weights": torch.ones(2)}, run / "best.pt")
    assert main(["evaluate", str(run), "--test", str(tsv["test"])]) == 2
    assert "is not a readable attncourse checkpoint" in one_error_line(capsys)


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--task", "dates", "--model", "gpt", "--out", "x"], "invalid choice: 'gpt'"),
        (["train", "--task", "dates"], "--out"),
        (["train", "--out", "x"], "give --task, or both --train and --valid"),
        (["train", "--task", "dates", "--max-value", "10", "--out", "x"], "numbers tasks only"),
        (["train", "--task", "dates", "--epochs", "0", "--out", "x"], "--epochs"),
        (["train", "--task", "dates", "--teacher-forcing", "2", "--out", "x"], "probability"),
        (["evaluate", "somewhere"], "--test"),
        (["fly"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message, capsys):
    assert main(args) == 2
    assert message in one_error_line(capsys)


def test_cuda_unavailable_is_one_error_line(tsv, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main([*train_args(tsv, tmp_path / "r"), "--device", "cuda"]) == 2
    assert "CUDA is not available" in one_error_line(capsys)


def test_evaluate_restores_thread_count(tsv, tmp_path):
    out = tmp_path / "run"
    assert main(train_args(tsv, out, epochs=1)) == 0
    before = torch.get_num_threads()
    assert main(["evaluate", str(out), "--test", str(tsv["test"]), "--threads", "1"]) == 0
    assert torch.get_num_threads() == before


# --- the Transformer's options ----------------------------------------------------------------


def resolved(*extra: str) -> argparse.Namespace:
    args = build_parser().parse_args(["train", "--task", "dates", "--out", "x", *extra])
    cli.validate_train_args(args)
    return args


def test_rnn_defaults_are_unchanged():
    args = resolved("--model", "rnn")
    assert (args.emb_dim, args.hidden_dim, args.dropout, args.epochs, args.batch_size, args.lr) == (
        64, 128, 0.0, 10, 64, 1e-3)
    assert (args.schedule, args.label_smoothing, args.optimizer, args.betas, args.amp, args.clip_norm) == (
        None, 0.0, "adam", (0.9, 0.999), None, 1.0)
    assert args.preset is None and args.n_train is None  # the task's own sizes


def test_presets_fill_what_is_not_given():
    cpu = resolved("--model", "transformer")  # the cpu preset is the default
    assert cpu.preset == "cpu"
    assert (cpu.d_model, cpu.num_heads, cpu.num_layers, cpu.d_ff, cpu.dropout) == (128, 4, 2, 512, 0.1)
    assert (cpu.label_smoothing, cpu.schedule, cpu.warmup, cpu.betas, cpu.eps) == (0.1, "noam", 400, (0.9, 0.98),
                                                                                   1e-9)
    gpu = resolved("--model", "transformer", "--preset", "gpu", "--d-model", "256", "--amp", "none", "--epochs",
                   "3", "--no-fused", "--n-train", "100")
    assert (gpu.d_model, gpu.num_heads, gpu.num_layers, gpu.d_ff) == (256, 8, 6, 2048)
    assert (gpu.amp, gpu.fused, gpu.epochs, gpu.optimizer, gpu.clip_norm, gpu.warmup) == (
        None, False, 3, "adamw", None, 400)
    # about 25,000 target tokens a batch (dates: 11 per pair), trained for a time budget
    assert (gpu.n_train, gpu.n_valid, gpu.batch_size) == (100, 1000, 2272)
    assert (gpu.time_budget, gpu.length_buckets) == (120.0, 4)
    budget = resolved("--model", "transformer", "--preset", "gpu", "--time-budget", "12.5")
    assert budget.time_budget == 12.5
    constant = resolved("--model", "transformer", "--schedule", "constant", "--lr", "0.0005", "--no-clip")
    assert (constant.schedule, constant.lr, constant.clip_norm) == (None, 5e-4, None)
    noam_rnn = resolved("--model", "rnn", "--schedule", "noam", "--warmup", "100", "--label-smoothing", "0.1")
    assert (noam_rnn.schedule, noam_rnn.warmup, noam_rnn.label_smoothing) == ("noam", 100, 0.1)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--model", "rnn", "--preset", "cpu"], "--preset applies to --model transformer only"),
        (["--model", "bahdanau", "--d-model", "64"], "--d-model applies to --model transformer only"),
        (["--heads", "2"], "--heads applies to --model transformer only"),
        (["--model", "transformer", "--hidden-dim", "64"], "--hidden-dim applies to --model rnn and bahdanau only"),
        (["--model", "transformer", "--lr", "0.001"], "--lr sets a constant rate"),
        (["--model", "rnn", "--warmup", "100"], "--warmup applies to --schedule noam only"),
        (["--model", "transformer", "--schedule", "constant", "--lr-scale", "2"], "--lr-scale applies to"),
        (["--model", "transformer", "--d-model", "100", "--heads", "8"], "not divisible by --heads 8"),
        (["--clip-norm", "1", "--no-clip"], "not both"),
        (["--label-smoothing", "1"], "[0, 1)"),
        (["--amp", "fp16"], "invalid choice: 'fp16'"),
        (["--model", "transformer", "--preset", "tpu"], "invalid choice: 'tpu'"),
        (["--betas", "0.9"], "--betas"),
    ],
)
def test_bad_transformer_options_exit_2_with_one_line(extra, message, capsys):
    assert main(["train", "--task", "dates", "--out", "x", *extra]) == 2
    assert message in one_error_line(capsys)


def test_help_documents_presets_and_torchrun(capsys):
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    for text in ("--preset", "--label-smoothing", "--warmup", "--amp", "--compile", "torchrun --nproc_per_node",
                 "d_model 512, 8 heads, 6+6 layers"):
        assert text in out, text


TINY_TRANSFORMER = ["--model", "transformer", "--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32",
                    "--warmup", "10", "--batch-size", "16", "--no-progress"]


def test_transformer_trains_resumes_and_evaluates(tsv, tmp_path, capsys):
    pytest.importorskip("attncourse.nn.transformer")
    out = tmp_path / "tf"
    base = ["train", "--train", str(tsv["train"]), "--valid", str(tsv["valid"]), "--out", str(out),
            *TINY_TRANSFORMER]
    assert main([*base, "--epochs", "1"]) == 0
    assert main([*base, "--epochs", "2", "--resume"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "transformer" and config["model_class"] == "Transformer"
    assert config["model"]["d_model"] == 16 and config["preset"] == "cpu"
    results = json.loads((out / "results.json").read_text())
    assert results["model"] == "transformer" and len(results["history"]) == 2
    assert main(["evaluate", str(out), "--test", str(tsv["test"]), "--beam-size", "2"]) == 0
    assert json.loads((out / "metrics.json").read_text())["model_class"] == "Transformer"


def test_one_table_holds_every_training_command():
    # issue 62: the commands were dispatched by two if-chains that had to agree
    parser = build_parser()
    names = set(parser._subparsers._group_actions[0].choices)
    assert names == set(cli.COMMANDS)
    assert main(["no-such-command"]) == 2
