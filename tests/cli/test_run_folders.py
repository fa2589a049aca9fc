"""The command line's run folders: a run folder the tool owns by content, run files read
only if they are regular files, a prompt that is not UTF-8.

Forged checkpoints and run files: tests/cli/test_forged_files.py.
"""

# ruff: noqa: F811 (the fixtures tsv and text_file: imported, then parameters)
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from attncourse.cli.commands import main
from attncourse.train.runfiles import MANIFEST_NAME, read_manifest, read_run_bytes
from tests.cli.test_commands import (  # noqa: F401 (tsv: the fixture)
    one_error_line,
    train_args,
    tsv,
)
from tests.cli.test_lm import SMALL as LM_SMALL
from tests.cli.test_lm import text_file  # noqa: F401 (the fixture)
from tests.cli.test_outputs_and_paths import (  # noqa: E402, F401 (the same run folders)
    lm_run,
    run,
)


def command(kind: str, out: Path, tsv, text_file) -> list[str]:
    if kind == "train":
        return train_args(tsv, out, epochs=1)
    return ["train-lm", "--text", str(text_file), "--out", str(out), *LM_SMALL]


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


# --- 1. --overwrite deletes only files the manifest shows the tool wrote -------


def test_the_manifest_records_every_file_a_run_wrote(run, lm_run):
    for out in (run, lm_run):
        listed = read_manifest(out)
        on_disk = {p.name for p in out.iterdir()} - {MANIFEST_NAME}
        assert set(listed) == on_disk, out
        assert "checkpoint.pt" in listed and "config.json" in listed


@pytest.mark.parametrize("kind", ["train", "train-lm"])
def test_overwrite_of_the_tools_own_run_still_works(
    run, lm_run, tsv, text_file, capsys, kind
):
    out = run if kind == "train" else lm_run
    assert main([*command(kind, out, tsv, text_file), "--overwrite"]) == 0
    assert set(read_manifest(out)) == {p.name for p in out.iterdir()} - {MANIFEST_NAME}


@pytest.mark.parametrize("kind", ["train", "train-lm"])
@pytest.mark.parametrize(
    "forged", [{"attncourse_version": "0"}, {"corpus": "x", "positional": "rope"}]
)
def test_a_forged_config_deletes_nothing(
    tmp_path, tsv, text_file, capsys, kind, forged
):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(forged))
    for name in (
        "checkpoint.pt",
        "history.json",
        "results.json",
        "vocab.json",
        "test.tsv",
    ):
        (out / name).write_text("the user's " + name)
    before = snapshot(out)
    assert main([*command(kind, out, tsv, text_file), "--overwrite"]) == 2
    assert one_error_line(capsys).startswith(
        f"attncourse: error: --overwrite: '{out}' has no {MANIFEST_NAME} recording "
        "the files attncourse wrote (a run of an earlier version, or not a run), so "
        "none of its files (checkpoint.pt, config.json, history.json, results.json, "
        "test.tsv and 1 more) is deleted; empty the folder "
        "yourself, or choose another --out"
    )
    assert snapshot(out) == before


@pytest.mark.parametrize("kind", ["train", "train-lm"])
@pytest.mark.parametrize(
    "name", ["checkpoint.pt", "config.json", "test.tsv", "vocab.json", "notes.txt"]
)
def test_a_changed_or_added_file_in_a_run_is_the_users(
    run, lm_run, tsv, text_file, capsys, kind, name
):
    out = run if kind == "train" else lm_run
    (out / name).write_text("the user's own")
    before = snapshot(out)
    assert main([*command(kind, out, tsv, text_file), "--overwrite"]) == 2
    assert one_error_line(capsys).startswith(
        "attncourse: error: --overwrite replaces only the files an earlier run wrote "
        f"(recorded with their digests in {MANIFEST_NAME}), and '{out}' holds {name} "
        "that no run wrote or that changed since; "
        "move it away or choose another --out"
    )
    assert snapshot(out) == before


def test_a_forged_manifest_cannot_claim_other_names(lm_run, text_file, capsys):
    (lm_run / "notes.txt").write_text("mine")
    manifest = json.loads((lm_run / MANIFEST_NAME).read_text())
    manifest["files"]["notes.txt"] = "0" * 64
    (lm_run / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert main([*command("train-lm", lm_run, None, text_file), "--overwrite"]) == 2
    assert "holds notes.txt that no run wrote" in one_error_line(capsys)
    assert (lm_run / "notes.txt").read_text() == "mine"


def test_a_run_can_still_be_resumed_after_its_manifest_is_lost(
    lm_run, text_file, capsys
):
    # a run of the previous version: no manifest; --resume continues it, records
    # its files
    (lm_run / MANIFEST_NAME).unlink()
    lm_args = command("train-lm", lm_run, None, text_file)
    assert main([*lm_args, "--steps", "60", "--resume"]) == 0
    assert {"config.json", "checkpoint.pt", "vocab.json", "history.json"} <= set(
        read_manifest(lm_run)
    )


# --- 2. no run in a filesystem root, the home folder, a folder of other things -


@pytest.mark.parametrize("kind", ["train", "train-lm"])
@pytest.mark.parametrize("where", ["root", "home"])
def test_root_and_home_are_refused(
    tmp_path, tsv, text_file, capsys, monkeypatch, kind, where
):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    out = Path("/") if where == "root" else home
    named = "a filesystem root" if where == "root" else "your home folder"
    assert main([*command(kind, out, tsv, text_file), "--overwrite"]) == 2
    assert one_error_line(capsys).startswith(
        f"attncourse: error: --out '{out}' is {named}, not a run folder: a run needs "
        "a folder of its own; "
        "choose another --out"
    )
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("kind", ["train", "train-lm"])
def test_a_folder_of_other_things_is_refused(tmp_path, tsv, text_file, capsys, kind):
    out = tmp_path / "docs"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(command(kind, out, tsv, text_file)) == 2
    assert one_error_line(capsys).startswith(
        f"attncourse: error: --out '{out}' is not empty and holds no attncourse run "
        "(notes.txt); a run needs "
        "a folder of its own: choose a new or empty --out"
    )
    assert snapshot(out) == {"notes.txt": b"mine"}


# --- 6. generate: a prompt that is not UTF-8 ----------------------------------


def test_generate_refuses_a_prompt_that_is_not_utf8(capsys):
    # refused by validate_generate_args, which runs before any model is loaded
    prompt = b"\xff\xfe".decode(sys.getfilesystemencoding(), "surrogateescape")
    assert main(["generate", prompt]) == 2
    assert one_error_line(capsys).startswith(
        "attncourse: error: PROMPT is not valid UTF-8 text (it holds bytes that decode "
        "to no character); "
        "give it in UTF-8"
    )


def test_generate_refuses_a_prompt_that_is_not_utf8_from_the_shell():
    proc = subprocess.run(
        [sys.executable, "-m", "attncourse", "generate", b"\xff\xfe"],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.decode().strip().splitlines() == [
        "attncourse: error: PROMPT is not valid UTF-8 text (it holds bytes that decode "
        "to no character); "
        "give it in UTF-8 (see 'attncourse generate --help')"
    ]


# --- 7. run files: regular files only, and not past a size limit -------------


def in_thread(call, timeout: float = 60.0):
    """``call()``'s result; the test fails (rather than hangs) if it blocks."""
    box = {}
    thread = threading.Thread(
        target=lambda: box.setdefault("value", call()), daemon=True
    )
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "blocked"
    return box.get("value")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_evaluate_with_a_fifo_results_json_does_not_block(run, tsv, capsys):
    (run / "results.json").unlink()
    os.mkfifo(run / "results.json")
    code = in_thread(
        lambda: main(["evaluate", str(run), "--test", str(tsv["valid"]), "--json", "-"])
    )
    assert code == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_sample_with_a_special_config_json_is_one_line(lm_run, capsys, special):
    (lm_run / "config.json").unlink()
    if special == "fifo":
        os.mkfifo(lm_run / "config.json")
    else:  # reading it would never end
        (lm_run / "config.json").symlink_to(special)
    code = in_thread(
        lambda: main(
            [
                "sample",
                str(lm_run),
                "--rope-scaling",
                "ntk",
                "--rope-factor",
                "2",
                "--length",
                "5",
            ]
        )
    )
    assert code == 2
    line = one_error_line(capsys)
    assert line.endswith(
        f"{lm_run / 'config.json'} is not a regular file "
        "(a FIFO, a device or a folder): "
        "a run file must be one"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("name", ["vocab.json", "checkpoint.pt"])
def test_a_fifo_vocab_or_checkpoint_is_one_line(lm_run, text_file, capsys, name):
    (lm_run / name).unlink()
    os.mkfifo(lm_run / name)
    code = in_thread(lambda: main(["sample", str(lm_run), "--length", "5"]))
    assert code == 2
    assert one_error_line(capsys).startswith(
        f"attncourse: error: DIR '{lm_run}' holds no checkpoint.pt and vocab.json "
        "(a run written by "
        "'attncourse train-lm')"
    )


def test_read_run_bytes_refuses_devices_and_huge_files(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"^/dev/zero is not a regular file \(a FIFO, a device or a "
        r"folder\): a run file must be one$",
    ):
        read_run_bytes(Path("/dev/zero"))
    big = tmp_path / "config.json"
    big.write_bytes(b" " * 101)
    with pytest.raises(
        ValueError, match=rf"^{big} is larger than 100 bytes: not a run file$"
    ):
        read_run_bytes(big, limit=100)


def test_a_huge_checkpoint_is_refused_before_loading(lm_run, capsys, monkeypatch):
    import attncourse.train.runfiles as runfiles

    monkeypatch.setattr(runfiles, "MAX_CHECKPOINT_BYTES", 10)
    monkeypatch.setattr(runfiles.validate_run_file, "__defaults__", (10,))
    assert main(["sample", str(lm_run), "--length", "5"]) == 2
    assert one_error_line(capsys).startswith(
        f"attncourse: error: {lm_run / 'checkpoint.pt'} is larger than 10 bytes: "
        "not a run file"
    )
