"""The command line's train-lm and sample: runs, resume after an interruption, one-line errors."""

import json

import pytest

import attncourse.recipes.lm as lm
from attncourse.cli.commands import main

TEXT = "hello world. the attention is all you need. " * 40
SMALL = ["--steps", "40", "--steps-per-epoch", "20", "--context", "16", "--d-model", "16", "--num-heads", "2",
         "--num-layers", "1", "--d-ff", "32", "--no-progress"]


def refused_in_one_line(argv: list[str], capsys) -> str:
    """Run the command line on ``argv``, which must refuse it (exit 2) in one error line; stderr."""
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.startswith("attncourse: error: ") and err.count("\n") == 1, err
    return err


@pytest.fixture()
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def test_train_then_sample(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert main(["train-lm", "--text", str(text_file), "--out", str(out), *SMALL]) == 0
    assert {p.name for p in out.iterdir()} == {"checkpoint.pt", "vocab.json", "config.json", "history.json",
                                               ".attncourse-run.json"}  # the manifest
    assert len(json.loads((out / "history.json").read_text())) == 2
    capsys.readouterr()
    assert main(["sample", str(out), "--prompt", "hello", "--length", "30", "--seed", "1"]) == 0
    first = capsys.readouterr().out
    assert first.startswith("hello") and len(first) == len("hello") + 30 + 1  # no special id is generated
    assert main(["sample", str(out), "--prompt", "hello", "--length", "30", "--seed", "1", "--no-cache"]) == 0
    assert capsys.readouterr().out == first  # same tokens with and without the cache


def test_resume_after_interruption_equals_an_uninterrupted_run(tmp_path, text_file, monkeypatch):
    whole = tmp_path / "whole"
    assert main(["train-lm", "--text", str(text_file), "--out", str(whole), *SMALL]) == 0
    calls = {"n": 0}
    real = lm.heldout_loss

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    part = tmp_path / "part"
    monkeypatch.setattr(lm, "heldout_loss", interrupted)
    assert main(["train-lm", "--text", str(text_file), "--out", str(part), *SMALL]) == 130
    monkeypatch.setattr(lm, "heldout_loss", real)
    assert main(["train-lm", "--text", str(text_file), "--out", str(part), *SMALL, "--resume"]) == 0
    a = json.loads((whole / "history.json").read_text())
    b = json.loads((part / "history.json").read_text())
    assert [r["valid_loss"] for r in a] == pytest.approx([r["valid_loss"] for r in b], rel=1e-6)
    # --overwrite starts again; a plain second run refuses to touch the directory
    assert main(["train-lm", "--text", str(text_file), "--out", str(part), *SMALL]) == 2
    assert main(["train-lm", "--text", str(text_file), "--out", str(part), *SMALL, "--overwrite"]) == 0


def test_errors_are_one_line(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    cases = [
        ["train-lm", "--text", str(tmp_path / "missing.txt"), "--out", str(out)],
        ["train-lm", "--text", str(text_file), "--out", str(out), "--resume", "--overwrite"],
        ["train-lm", "--text", str(text_file), "--out", str(out), "--num-heads", "3"],
        ["train-lm", "--text", str(text_file), "--out", str(out), "--resume"],
        ["train-lm", "--text", str(text_file), "--out", str(out), "--steps", "30", "--steps-per-epoch", "20"],
        ["sample", str(tmp_path)],
    ]
    for argv in cases:
        capsys.readouterr()
        refused_in_one_line(argv, capsys)
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe" * 100)
    assert main(["train-lm", "--text", str(binary), "--out", str(tmp_path / "b"), *SMALL]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_resume_with_another_text_is_refused(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert main(["train-lm", "--text", str(text_file), "--out", str(out), *SMALL]) == 0
    other = tmp_path / "other.txt"
    other.write_text(TEXT.upper(), encoding="utf-8")
    capsys.readouterr()
    assert main(["train-lm", "--text", str(other), "--out", str(out), *SMALL, "--resume"]) == 2
    assert "differ" in capsys.readouterr().err


def test_sample_with_a_draft_reports_the_acceptance_rate(tmp_path, text_file, capsys):
    target, draft, other = tmp_path / "target", tmp_path / "draft", tmp_path / "other"
    assert main(["train-lm", "--text", str(text_file), "--out", str(target), *SMALL]) == 0
    small = [a if a != "16" else "8" for a in SMALL]  # a narrower model: d_model 8, context 8
    assert main(["train-lm", "--text", str(text_file), "--out", str(draft), *small, "--seed", "1"]) == 0
    capsys.readouterr()
    assert main(["sample", str(target), "--prompt", "hello", "--length", "30", "--draft", str(draft),
                 "--draft-tokens", "3"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("hello") and len(out) == len("hello") + 30 + 1
    assert "accepted" in err and "3 draft tokens per round" in err and "per token" in err
    # a draft of another text: one line naming the vocabulary
    text2 = tmp_path / "text2.txt"
    text2.write_text("xyz qrs " * 200, encoding="utf-8")
    assert main(["train-lm", "--text", str(text2), "--out", str(other), *SMALL]) == 0
    capsys.readouterr()
    assert main(["sample", str(target), "--draft", str(other), "--length", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another vocabulary" in err
    assert main(["sample", str(target), "--draft", str(draft), "--draft-tokens", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--draft-tokens" in err
    assert main(["sample", str(target), "--draft", str(tmp_path / "none")]) == 2
    assert "--draft" in capsys.readouterr().err


def test_train_lm_with_latent_attention_samples_the_same_with_and_without_the_cache(
        tmp_path, text_file, capsys):
    """--latent-dim trains an MLA model (chapter 10) whose checkpoint says so; its cache is exact."""
    out = tmp_path / "mla"
    argv = ["train-lm", "--text", str(text_file), "--out", str(out), *SMALL, "--positional", "rope",
            "--latent-dim", "8", "--rope-dim", "4"]
    assert main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["latent_dim"], config["rope_dim"]) == (8, 4), config
    capsys.readouterr()
    assert main(["sample", str(out), "--prompt", "hello", "--length", "20", "--seed", "1"]) == 0
    cached = capsys.readouterr().out
    assert main(["sample", str(out), "--prompt", "hello", "--length", "20", "--seed", "1", "--no-cache"]) == 0
    assert capsys.readouterr().out == cached


@pytest.mark.parametrize("extra, option", [
    (["--rope-dim", "4"], "(latent_dim chooses 'mla')"),  # the spec's rule, in its words
    (["--latent-dim", "8", "--num-kv-heads", "1"], "cannot be combined"),
    (["--latent-dim", "8", "--window", "4"], "cannot be combined"),
    (["--latent-dim", "8", "--positional", "alibi"], "cannot be combined"),
    (["--latent-dim", "8", "--positional", "rope", "--rope-dim", "3"], "even number"),
    (["--latent-dim", "8", "--positional", "learned", "--rope-dim", "4"], "needs positional='rope'"),
    (["--latent-dim", "99999"], "--latent-dim"),
])
def test_latent_attention_options_refused_in_one_line(extra, option, tmp_path, text_file, capsys):
    out = tmp_path / "run"
    err = refused_in_one_line(["train-lm", "--text", str(text_file), "--out", str(out), *SMALL, *extra], capsys)
    assert option in err, err
    assert not out.exists()


def test_train_lm_under_no_training_is_one_line(tmp_path, text_file, capsys, monkeypatch):
    # Issue 64: ATTNCOURSE_NO_TRAINING=1 (grading's setting) made train-lm end in UnpreparedRun's traceback.
    monkeypatch.setenv("ATTNCOURSE_NO_TRAINING", "1")
    err = refused_in_one_line(["train-lm", "--text", str(text_file), "--out", str(tmp_path / "run"), *SMALL], capsys)
    assert "ATTNCOURSE_NO_TRAINING" in err and "prepare" in err
