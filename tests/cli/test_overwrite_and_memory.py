"""The command line: no user file replaced even with --overwrite, no traceback from any option
value, memory bounded for train-lm and sample.

Bad inputs and faults in general are tests/cli/test_safety.py; the property test over every
numeric option is tests/cli/test_extremes.py.
"""

# ruff: noqa: F811 (the fixtures tsv and text_file are imported, then named as parameters)
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import torch

import attncourse.cli.commands as cli
import attncourse.cli.train_evaluate as train_evaluate
import attncourse.recipes.lm as lm
from attncourse.cli.commands import build_parser, main
from attncourse.cli.limits import LIMITS, validate_model_config
from attncourse.cli.rundir import write_json
from attncourse.data.text import char_corpus
from attncourse.data.vocab import Vocabulary
from attncourse.train.runfiles import note_written
from tests.cli.test_commands import (  # noqa: F401 (tsv: the fixture)
    SMALL,
    one_error_line,
    train_args,
    tsv,
)
from tests.cli.test_lm import SMALL as LM_SMALL
from tests.cli.test_lm import TEXT, text_file  # noqa: F401 (the fixture)

TASK = [
    "--task",
    "numbers-en-fr",
    "--n-train",
    "40",
    "--n-valid",
    "8",
    "--n-test",
    "8",
    "--max-value",
    "100",
    "--model",
    "rnn",
    "--epochs",
    "1",
    *SMALL,
]


def refused(argv: list[str], capsys) -> str:
    """Run the command line on ``argv``, which must refuse it (exit status 2); its one error line."""
    assert main(argv) == 2
    return one_error_line(capsys)


def train_lm(text_file: Path, out: Path, *options: str) -> int:
    """``train-lm`` on ``text_file`` into ``out`` with ``options``; its exit status."""
    return main(["train-lm", "--text", str(text_file), "--out", str(out), *options])


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture
def lm_run(tmp_path, text_file):  # noqa: F811
    out = tmp_path / "lm"
    assert train_lm(text_file, out, *LM_SMALL) == 0
    return out


# --- 1. --overwrite and --resume replace only files the run wrote ----------------------------


def test_overwrite_deletes_only_what_the_earlier_run_recorded(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["train", *TASK, "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert set(config["files"]) >= {
        "checkpoint.pt",
        "best.pt",
        "config.json",
        "test.tsv",
    }
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    # a file the tool did not write makes --overwrite refuse, deleting nothing
    assert main(["train", *TASK, "--out", str(out), "--overwrite", "--n-test", "0"]) == 2
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert (out / "test.tsv").exists()
    (out / "notes.txt").unlink()
    assert (
        main(["train", *TASK, "--out", str(out), "--overwrite", "--n-test", "0"]) == 0
    )
    assert not (
        out / "test.tsv"
    ).exists()  # the earlier run's, deleted: this run writes none
    assert "test.tsv" not in json.loads((out / "config.json").read_text())["files"]


def test_resume_keeps_an_edited_test_tsv(tmp_path):
    out = tmp_path / "r"
    assert main(["train", *TASK, "--out", str(out)]) == 0
    (out / "test.tsv").write_text("edited\tby hand\n", encoding="utf-8")
    assert main(["train", *TASK, "--out", str(out), "--epochs", "2", "--resume"]) == 0
    assert (out / "test.tsv").read_text(encoding="utf-8") == "edited\tby hand\n"


def test_overwrite_help_says_what_is_deleted():
    sub = build_parser()._subparsers._group_actions[0].choices
    for command in ("train", "train-lm"):
        text = " ".join(sub[command].format_help().split())
        assert "recorded with their digests in its .attncourse-run.json" in text


# --- 2. train-lm onto a train run: every condition checked before writing -----------------------


def test_train_lm_onto_a_train_run(tmp_path, text_file, capsys):  # noqa: F811
    out = tmp_path / "r"
    assert main(["train", *TASK, "--out", str(out)]) == 0
    before = files(out)
    capsys.readouterr()
    line = refused(["train-lm", "--text", str(text_file), "--out", str(out), *LM_SMALL, "--resume"], capsys)
    assert "'train' run" in line
    assert files(out) == before  # no vocab.json written
    assert train_lm(text_file, out, *LM_SMALL, "--overwrite") == 0
    names = set(os.listdir(out))
    assert names == {
        "checkpoint.pt",
        "vocab.json",
        "config.json",
        "history.json",
        ".attncourse-run.json",
    }  # no best.pt, results.json; the manifest


# --- 3. train-lm's corpus: compact encoding, a stated cap --------------------------------------


def test_compact_encoding_equals_the_vocabulary_and_is_small():
    text = "héllo wörld, 注意力机制 \U0001f600 abc\n" * 50 + "zz"
    corpus = char_corpus(text, 0.2)
    cut = int(round(len(text) * 0.8))
    vocab = Vocabulary.build([list(text[:cut])])
    assert corpus.vocab == vocab
    assert corpus.train.tolist() == vocab.encode(list(text[:cut]))
    assert corpus.valid.tolist() == vocab.encode(list(text[cut:]))  # "z" unseen: <unk>
    big = "".join(chr(0x4E00 + i % 3000) for i in range(1_000_000))
    tracemalloc.start()
    char_corpus(big, 0.1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak / len(big) < 40  # bytes per character (was ~87)


def test_text_above_max_chars_is_refused(tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text(TEXT, encoding="utf-8")
    assert "--max-chars" in refused(["train-lm", "--text", str(path), "--out", str(tmp_path / "o"),
                                     *LM_SMALL, "--max-chars", "100"], capsys)
    assert not (tmp_path / "o").exists()


# --- 4. sample: an untrusted checkpoint does not choose the memory ---------------------------


def test_checkpoint_asking_for_huge_sizes_is_refused(lm_run, capsys):
    path = lm_run / "checkpoint.pt"
    data = torch.load(path, weights_only=True)
    data["model_config"]["spec"]["max_len"] = 10**9
    torch.save(data, path)
    note_written(path)  # the forger edits the manifest too: the size check is tested
    capsys.readouterr()
    assert main(["sample", str(lm_run), "--prompt", "hello"]) == 2
    line = one_error_line(capsys)
    assert "max_len" in line and "1,000,000,000" in line
    with pytest.raises(ValueError, match="not a whole number"):
        validate_model_config({"d_model": "64"}, "x")


def test_memory_error_is_one_line(lm_run, capsys, monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(sys.modules["attncourse.cli.lm"], "generate", no_memory)
    capsys.readouterr()
    assert main(["sample", str(lm_run), "--prompt", "hello"]) == 2
    assert "memory" in one_error_line(capsys)


# --- 5. every size has a documented ceiling ----------------------------------------------------


TRANSFORMER = ["train", "--task", "dates", "--model", "transformer"]


@pytest.mark.parametrize(
    "argv, option",
    [
        (["train", *TASK, "--batch-size", "1000000"], "--batch-size"),
        (["train", *TASK, "--threads", "100000"], "--threads"),
        ([*TRANSFORMER, "--d-model", "65536", "--heads", "1"], "--d-model"),
        ([*TRANSFORMER, "--d-ff", "10000000"], "--d-ff"),
        ([*TRANSFORMER, "--heads", "1024", "--d-model", "1024"], "--heads"),
        ([*TRANSFORMER, "--layers", "1000"], "--layers"),
        (
            ["train", "--train", "X", "--valid", "X", "--max-tokens", "1000000"],
            "--max-tokens",
        ),
        (["train-lm", "--max-len", "1000000000"], "--max-len"),
        (["train-lm", "--d-model", "100000", "--num-heads", "1"], "--d-model"),
        (["train-lm", "--batch-size", "100000000"], "--batch-size"),
        (["train-lm", "--num-layers", "100000"], "--num-layers"),
        (["train-lm", "--threads", "100000"], "--threads"),
    ],
)
def test_sizes_above_their_ceiling_are_refused(argv, option, tmp_path, capsys):
    x = tmp_path / "x.tsv"
    x.write_text("a\tb\n", encoding="utf-8")
    argv = [str(x) if a == "X" else a for a in argv]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    line = one_error_line(capsys)
    assert option in line and "at most" in line
    assert not (tmp_path / "o").exists()


def test_beam_size_and_prompt_have_ceilings(lm_run, tsv, tmp_path, capsys):  # noqa: F811
    assert "--beam-size" in refused(["evaluate", str(tmp_path), "--test", str(tsv["test"]),
                                     "--beam-size", "100000"], capsys)
    assert main(["sample", str(lm_run), "--prompt", "a" * 56_000]) == 2
    assert "--prompt" in one_error_line(capsys)
    assert (
        main(["sample", str(lm_run), "--prompt", "hello", "--length", "1000000"]) == 2
    )
    assert "--length" in one_error_line(capsys)


def test_help_states_the_ceilings(capsys):
    sub = build_parser()._subparsers._group_actions[0].choices
    text = " ".join(sub["train-lm"].format_help().split())
    assert f"[at most {LIMITS['max_len'].high:,}]" in text


# --- 6, 7. float options beyond float32, or nearly zero ---------------------------------------


@pytest.mark.parametrize("value", ["1e-40", "1e-320", "3.5e38", "1e308"])
def test_extreme_temperature_is_refused(value, lm_run, capsys):
    capsys.readouterr()
    assert main(["sample", str(lm_run), "--temperature", value]) == 2
    assert "--temperature" in one_error_line(capsys)


@pytest.mark.parametrize(
    "args, option",
    [
        (["--lr", "3e38"], "--lr"),
        (["--weight-decay", "1e308"], "--weight-decay"),
        (["--adam-eps", "1e308"], "--adam-eps"),
        (["--clip-norm", "1e300"], "--clip-norm"),
    ],
)
def test_float32_overflow_is_refused(args, option, tmp_path, capsys):
    assert main(["train", *TASK, "--out", str(tmp_path / "o"), *args]) == 2
    assert option in one_error_line(capsys)
    assert "--lr-scale" in refused(["train", "--task", "dates", "--model", "transformer",
                                    "--schedule", "noam", "--lr-scale", "1e308", "--out",
                                    str(tmp_path / "o")], capsys)


def test_length_penalty_and_train_lm_lr_overflow(tsv, tmp_path, text_file, capsys):  # noqa: F811
    assert "--length-penalty" in refused(["evaluate", str(tmp_path), "--test", str(tsv["test"]),
                                          "--length-penalty", "1e308"], capsys)
    assert "--lr" in refused(["train-lm", "--text", str(text_file), "--out", str(tmp_path / "o"),
                              "--lr", "1e39"], capsys)


# --- 8. a diverged run stops with a message; JSON is strict ------------------------------------


def test_diverged_run_stops_and_json_is_strict(
    tmp_path, text_file, capsys, monkeypatch
):  # noqa: F811
    real = lm.F.cross_entropy

    class NaNLoss:
        def __getattr__(self, name):
            return getattr(torch.nn.functional, name)

        @staticmethod
        def cross_entropy(*args, **kwargs):
            return real(*args, **kwargs) * float("nan")

    monkeypatch.setattr(lm, "F", NaNLoss())
    line = refused(["train-lm", "--text", str(text_file), "--out", str(tmp_path / "o"), *LM_SMALL], capsys)
    assert "diverged" in line and "learning rate" in line
    path = tmp_path / "strict.json"
    write_json(path, [{"loss": float("nan"), "x": float("inf")}])

    def refuse(name):
        raise ValueError(name)

    assert json.loads(path.read_text(), parse_constant=refuse) == [
        {"loss": None, "x": None}
    ]


# --- 9. seeds up to 2**63 - 1 work -------------------------------------------------------------


def test_huge_seed_trains(tmp_path, text_file):
    """Seeds up to 2**63 - 1, as the help promises (the epoch seed wraps modulo 2**63)."""
    for i, seed in enumerate(("200000000000000", str(2**63 - 1))):
        argv = ["train-lm", "--text", str(text_file), "--out", str(tmp_path / f"o{i}")]
        assert main([*argv, *LM_SMALL, "--seed", seed]) == 0


# --- 10. Ctrl-C during a checkpoint write, and during the imports -------------------------------


def test_ctrl_c_inside_torch_save_is_an_interruption(
    tmp_path, text_file, capsys, monkeypatch
):  # noqa: F811
    import attncourse.train.checkpoint as checkpoint

    def interrupted_save(obj, f):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as err:  # what torch's zip writer does with it
            raise RuntimeError(
                "[enforce fail at inline_container.cc] . unexpected pos"
            ) from err

    monkeypatch.setattr(checkpoint.torch, "save", interrupted_save)
    out = tmp_path / "o"
    assert train_lm(text_file, out, *LM_SMALL) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err and "Traceback" not in err
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]


def test_ctrl_c_during_imports_is_one_line(tmp_path):
    code = (
        "import sys, runpy\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'attncourse.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Stop())\n"
        "sys.argv = ['attncourse', 'train', '--help']\n"
        "runpy.run_module('attncourse', run_name='__main__')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 130 and proc.stderr == "attncourse: interrupted\n"


# --- 11. interrupted before the first checkpoint: --resume and a plain re-run both work --------


def test_interrupted_before_first_checkpoint_train(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "o"
    monkeypatch.setattr(train_evaluate, "fit", interrupted)
    assert main(["train", *TASK, "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert "--resume" not in err and "run the same command again" in err
    monkeypatch.undo()
    assert main(["train", *TASK, "--out", str(out), "--resume"]) == 0
    monkeypatch.setattr(train_evaluate, "fit", interrupted)
    assert main(["train", *TASK, "--out", str(tmp_path / "p")]) == 130
    monkeypatch.undo()
    assert main(["train", *TASK, "--out", str(tmp_path / "p")]) == 0


def test_interrupted_before_first_checkpoint_train_lm(
    tmp_path, text_file, capsys, monkeypatch
):  # noqa: F811
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    for again in (["--resume"], []):
        out = tmp_path / f"o{len(again)}"
        monkeypatch.setattr(lm, "heldout_loss", interrupted)
        assert train_lm(text_file, out, *LM_SMALL) == 130
        assert "run the same command again" in capsys.readouterr().err
        monkeypatch.undo()
        assert train_lm(text_file, out, *LM_SMALL, *again) == 0, again


# --- 12. train-lm removes leftover temporaries; a Ctrl-C right after mkstemp leaves none ---------


def test_train_lm_removes_leftover_temporaries(lm_run, text_file, monkeypatch):  # noqa: F811
    leftover = lm_run / ".checkpoint.pt.k1ll3d_x.tmp"
    leftover.write_bytes(b"partial")
    assert train_lm(text_file, lm_run, *LM_SMALL[:1], "60", *LM_SMALL[2:], "--resume") == 0
    assert not leftover.exists()
    from attncourse.train.checkpoint import atomic_write_text

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fchmod", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text("x", lm_run / "x.txt")
    assert not [p for p in os.listdir(lm_run) if p.endswith(".tmp")]


# --- 13. train-lm --resume with more steps extends the run; a mismatch is named -----------------


def test_resume_with_more_steps_extends(lm_run, text_file, capsys):  # noqa: F811
    more = [*LM_SMALL[:1], "60", *LM_SMALL[2:]]
    assert train_lm(text_file, lm_run, *more, "--resume") == 0
    assert len(json.loads((lm_run / "history.json").read_text())) == 3
    assert "raise --steps" in refused(["train-lm", "--text", str(text_file), "--out", str(lm_run),
                                       *more, "--resume"], capsys)
    other = [a if a != "32" else "64" for a in more]  # --d-ff 64
    line = refused(["train-lm", "--text", str(text_file), "--out", str(lm_run), *other, "--resume"], capsys)
    assert (
        "d_ff: 32 in the checkpoint, 64 in this command" in line
        and "delete the folder" not in line
    )


# --- 14. messages -----------------------------------------------------------------------------


def test_checkpoint_and_vocab_messages(lm_run, tmp_path, capsys):
    path = lm_run / "checkpoint.pt"
    whole = path.read_bytes()
    for content in (whole[: len(whole) // 2], b"hello, I am a text file\n" * 10):
        path.write_bytes(content)
        note_written(path)  # recorded: torch's own reason is tested (tests/cli/test_forged_files.py checks the digest)
        assert main(["sample", str(lm_run)]) == 2
        line = one_error_line(capsys)  # one line: no torch warning before it
        assert "Errno" not in line and not line.rstrip().endswith(": 101")
        assert "cut short" in line or "not a file written by torch.save" in line
    path.write_bytes(whole)
    note_written(path)
    (lm_run / "vocab.json").write_text("[1, 2", encoding="utf-8")
    assert main(["sample", str(lm_run)]) == 2
    assert "vocab.json" in one_error_line(capsys)


def test_text_dir_unseen_prompt_and_crlf(lm_run, tmp_path, capsys):
    assert (
        main(["train-lm", "--text", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    )
    line = one_error_line(capsys)
    assert "is a directory" in line and "no such file" not in line
    assert main(["sample", str(lm_run), "--prompt", "hello ÿ"]) == 2
    assert "'ÿ'" in one_error_line(capsys)
    assert main(["sample", str(lm_run), "--prompt", "hello", "--length", "200"]) == 0
    assert "<unk>" not in capsys.readouterr().out
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(TEXT.replace(". ", ".\r\n").encode())
    assert (
        main(["train-lm", "--text", str(crlf), "--out", str(tmp_path / "c"), *LM_SMALL])
        == 0
    )
    assert "CRLF" in capsys.readouterr().err
    assert "\r" not in json.loads((tmp_path / "c" / "vocab.json").read_text())["tokens"]
    assert not math.isnan(
        json.loads((tmp_path / "c" / "history.json").read_text())[-1]["valid_loss"]
    )


def test_sizes_within_ceilings_but_too_big_together_are_refused(tmp_path, capsys):
    """Each size below its ceiling, the model not: checked against the machine's memory."""
    argv = [*TRANSFORMER, "--d-model", "4096", "--heads", "64", "--layers", "48", "--d-ff", "16384"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    line = one_error_line(capsys)
    assert "GiB of memory" in line and "training with these model options" in line
    assert not (tmp_path / "o").exists()


def test_a_spec_built_config_is_size_checked_too():
    from attncourse.nn.gpt import GPT
    from attncourse.nn.spec import DecoderSpec

    config = GPT(spec=DecoderSpec(10, d_model=32, num_heads=4, num_layers=1)).config
    validate_model_config(config, "x")  # a small spec passes
    for part, key in ((None, "max_len"), ("ffn", "d_ff"), (None, "num_layers")):
        huge = {**config["spec"]}
        if part is None:
            huge[key] = 10**9
        else:
            huge[part] = {**huge[part], key: 10**9}
        with pytest.raises(ValueError, match=f"{key} 1,000,000,000"):
            validate_model_config({"spec": huge}, "x")
