"""tools/hostile_cli.py's classifier and snapshots, unit-level: no invocation is run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import hostile_cli as hostile  # noqa: E402

TRACEBACK = ('Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
             "TypeError: gru() received an invalid combination of arguments\n")


def test_a_traceback_is_a_traceback_whatever_the_status():
    for code in (0, 1, 2):
        assert hostile.classify(code, TRACEBACK) == "traceback"
    assert hostile.classify(-6, "attncourse: interrupted\n") == "traceback"  # an abort: a crash


def test_a_clean_error_is_one_line():
    line = "attncourse: error: --epochs: expected a whole number, got 'x' (see 'attncourse train --help')\n"
    assert hostile.classify(2, line) == "clean error"
    assert hostile.classify(2, "attncourse: note: kept README.md\n" + line) == "clean error"
    assert hostile.classify(2, line + line) == "messy error"
    assert hostile.classify(2, "something else\n" + line) == "messy error"
    assert hostile.classify(2, "") == "messy error"
    assert hostile.classify(0, "epoch 1 ...\n") == "success"


def test_a_hang_and_an_interrupt():
    assert hostile.classify(None, "", timed_out=True) == "hang"
    assert hostile.classify(130, "attncourse: interrupted; continue with --resume\n", interrupted=True) \
        == "interrupted"
    assert hostile.classify(130, "attncourse: interrupted\n") == "messy error"  # no Ctrl-C was sent


def test_a_deleted_or_replaced_user_file(tmp_path):
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "vocab.json").write_text("the user's")
    planted = ["user/notes.txt", "run/vocab.json"]
    before = hostile.snapshot(tmp_path)
    assert hostile.changed_files(before, hostile.snapshot(tmp_path), planted) == []
    (tmp_path / "run" / "vocab.json").unlink()
    (tmp_path / "user" / "notes.txt").write_text("replaced")
    after = hostile.snapshot(tmp_path)
    changed = hostile.changed_files(before, after, planted)
    assert changed == planted
    # worse than the clean exit it came with
    assert hostile.classify(0, "", changed=changed) == "user file deleted or replaced"


def test_a_file_written_outside_the_run_folder(tmp_path):
    (tmp_path / "run").mkdir()
    before = hostile.snapshot(tmp_path)
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"x")
    (tmp_path / "stray.json").write_text("{}")
    outside = hostile.new_outside(before, hostile.snapshot(tmp_path), ["run"])
    assert outside == ["stray.json"]
    assert hostile.classify(0, "", outside=outside) == "written outside"


def test_every_category_is_sampled_by_a_limit():
    cases = hostile.all_cases(seed=0, fuzz=800)
    assert len(cases) + sum(case.twin is not None for case in cases) >= 1000
    categories = {case.category for case in cases}
    assert {case.category for case in cases[:60]} >= categories - {"symlinked run file", "root or home"}


def test_a_base_run_that_hangs_is_an_outcome_and_the_run_goes_on(tmp_path, monkeypatch):
    # issue 64: on a slow machine the tool died of its own TimeoutExpired at its first base run
    monkeypatch.setattr(hostile, "_start", lambda argv, case_dir, env=None: argv)
    monkeypatch.setattr(hostile, "_finish", lambda argv, timeout, sigint: (
        (None, "", True) if "lm" in argv else (0, "", False)))
    results = hostile.build_bases(tmp_path / "base")
    assert [r["outcome"] for r in results] == ["hang", "success", "success", "success"]
    case = hostile.Case("course", "needs the hung base", ["sample", "lm"], needs=("lm",))
    (tmp_path / "base").mkdir(exist_ok=True)
    for name in ("text.txt", "train.tsv", "valid.tsv", "test.tsv"):
        (tmp_path / "base" / name).write_text("x")
    [row] = hostile.run_case(case, tmp_path / "base", tmp_path, 0)
    assert row["outcome"] == "harness error" and "did not finish" in row["stderr"]


def test_the_course_commands_have_their_cases():
    from hostile_cases import _NOT_NOTEBOOKS, course_cases

    names = [c.name for c in course_cases()]
    assert len(names) == len(set(names)) == len(_NOT_NOTEBOOKS) + 9
    assert any(c.env.get("ATTNCOURSE_NO_TRAINING") == "1" for c in course_cases())
