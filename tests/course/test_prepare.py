"""Grading never trains: ``python -m attncourse prepare`` trains the
chapters' cached models once; with ``$ATTNCOURSE_NO_TRAINING`` (set for ``nbgrader
autograde`` by the course's config, and in the grade of record's processes) a cached run is
only loaded, and one that is missing or unfinished fails at once, naming itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from attncourse.runtime import NO_TRAINING_ENV, UnpreparedRun
from attncourse.train.loop import Loop, run_epochs

ROOT = Path(__file__).resolve().parents[2]

#: A tiny cached run, as a chapter trains one (the same code runs in the fake chapter below).
TINY = '''
import torch
from attncourse.train.loop import train_epochs

CALLS = []


def tiny_run(epochs=2, fail_at=None):
    def build(device):
        model = torch.nn.Linear(2, 1).to(device)
        return model, torch.optim.SGD(model.parameters(), lr=0.1)

    def train_epoch(epoch):
        CALLS.append(epoch.number)
        if epoch.number == fail_at:
            raise KeyboardInterrupt  # the grader's time limit, or Ctrl-C
        x = torch.randn(16, 2)
        loss = (epoch.forward(x) - x.sum(1, keepdim=True)).pow(2).mean()
        epoch.step(loss)
        return {"loss": float(loss.detach())}

    return train_epochs("tiny/linear", {"epochs": epochs}, build, train_epoch,
                        lambda model: {"valid": 0.0}, epochs, progress=False, device="cpu",
                        extendable=("epochs",))
'''


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """``(tiny_run, CALLS, runs)`` with ``$ATTNCOURSE_RUNS`` an empty folder."""
    runs = tmp_path / "runs"
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(runs))
    monkeypatch.delenv(NO_TRAINING_ENV, raising=False)
    space: dict = {}
    exec(compile(TINY, "<tiny>", "exec"), space)  # noqa: S102 - the test's own code
    return space["tiny_run"], space["CALLS"], runs


def _files(runs: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``runs`` (the lock aside) with its size and modification time."""
    return {str(p.relative_to(runs)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in runs.rglob("*") if p.is_file() and p.name != ".lock"}


def test_a_prepared_run_is_only_loaded_while_grading(tiny, monkeypatch):
    tiny_run, calls, runs = tiny
    trained = tiny_run()
    assert calls == [1, 2]
    before = _files(runs)
    assert any(name.endswith("checkpoint.pt") for name in before)
    monkeypatch.setenv(NO_TRAINING_ENV, "1")
    loaded = tiny_run()
    assert calls == [1, 2], "grading trained"  # no epoch ran
    assert _files(runs) == before  # nothing written: the cache is read, not rewritten
    for a, b in zip(trained.model.parameters(), loaded.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_an_unprepared_run_fails_at_once_while_grading_and_writes_nothing(tiny, monkeypatch):
    tiny_run, calls, runs = tiny
    monkeypatch.setenv(NO_TRAINING_ENV, "1")
    with pytest.raises(UnpreparedRun, match=r"tiny/linear-\w+ holds 0 of the run's 2 epochs") as err:
        tiny_run()
    assert "attncourse prepare" in str(err.value) and "\n" not in str(err.value)
    assert calls == [] and not any(name.endswith(".pt") for name in _files(runs))
    monkeypatch.setenv(NO_TRAINING_ENV, "0")  # 0 or unset: training as usual
    tiny_run()
    assert calls == [1, 2]


def test_an_interrupted_preparation_leaves_its_last_finished_epoch_and_no_partial_file(tiny, monkeypatch):
    tiny_run, calls, runs = tiny
    with pytest.raises(KeyboardInterrupt):
        tiny_run(epochs=3, fail_at=2)
    assert not [name for name in _files(runs) if name.endswith(".tmp")]
    monkeypatch.setenv(NO_TRAINING_ENV, "1")
    with pytest.raises(UnpreparedRun, match="holds 1 of the run's 3 epochs"):
        tiny_run(epochs=3)
    monkeypatch.delenv(NO_TRAINING_ENV)
    calls.clear()
    run = tiny_run(epochs=3)  # prepare again: it resumes after the finished epoch
    assert calls == [2, 3] and len(run.history) == 3


def test_a_model_trained_in_memory_still_trains_while_grading(monkeypatch):
    # Not a cached run: a chapter's small in-notebook model, or a learner's own loop (7b).
    monkeypatch.setenv(NO_TRAINING_ENV, "1")
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []

    def train_epoch(epoch):
        seen.append(epoch.number)
        return {"loss": 0.0}

    record = run_epochs(model, optimizer, train_epoch, lambda m: {}, Loop(2, progress=False),
                        device=torch.device("cpu"))
    assert seen == [1, 2] and len(record.history) == 2


CHAPTER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A tiny chapter

```{code-cell} ipython3
%s
run = tiny_run()
print("trained epochs:", CALLS)
```
"""


def _env(runs: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != NO_TRAINING_ENV}
    env.update(ATTNCOURSE_RUNS=str(runs), PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
               **more)
    return env


def test_prepare_runs_each_chapter_once_and_autograde_then_loads(tmp_path):
    notebooks, runs = tmp_path / "notebooks", tmp_path / "runs"
    notebooks.mkdir()
    chapter = notebooks / "01_tiny.md"
    chapter.write_text(CHAPTER % textwrap.indent(TINY, ""), encoding="utf-8")
    command = [sys.executable, "-m", "attncourse", "prepare", "01_tiny", "--notebooks", str(notebooks),
               "--runs", str(runs)]
    done = subprocess.run(command, env=_env(tmp_path / "elsewhere", **{NO_TRAINING_ENV: "1"}),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "01_tiny: prepared in" in done.stdout
    prepared = json.loads((runs / "prepared.json").read_text())
    assert set(prepared) == {"01_tiny"} and prepared["01_tiny"]["seconds"] > 0
    cached = _files(runs)
    assert any(name.endswith("checkpoint.pt") for name in cached)
    again = subprocess.run(command, env=_env(runs), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "01_tiny: prepared already" in again.stdout
    # What autograde's kernel runs: the chapter's code, with the course config's variable set.
    code = TINY + "\nrun = tiny_run()\nassert CALLS == [], CALLS\n"
    graded = subprocess.run([sys.executable, "-c", code], env=_env(runs, **{NO_TRAINING_ENV: "1"}),
                            capture_output=True, text=True, timeout=300)
    assert graded.returncode == 0, graded.stderr
    assert _files(runs) == cached
    unprepared = subprocess.run([sys.executable, "-c", code],
                                env=_env(tmp_path / "empty", **{NO_TRAINING_ENV: "1"}),
                                capture_output=True, text=True, timeout=300)
    assert unprepared.returncode != 0 and "UnpreparedRun" in unprepared.stderr


def test_prepare_names_a_failing_chapter_in_one_line(tmp_path, capsys, monkeypatch):
    from attncourse.course.prepare import main

    # main() sets $ATTNCOURSE_RUNS for its kernels: undone after the test, as for a command
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path / "runs"))

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "02_broken.md").write_text(CHAPTER % "raise ValueError('no data here')", encoding="utf-8")
    assert main(["02_broken", "--notebooks", str(notebooks), "--runs", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "02_broken" in err and "no data here" in err
    assert not (tmp_path / "runs" / "prepared.json").exists()
    assert main(["nope", "--notebooks", str(notebooks)]) == 2
    assert "'nope' is not a chapter" in capsys.readouterr().err


def test_the_course_config_forbids_training_under_autograde_only(tmp_path, monkeypatch):
    pytest.importorskip("nbgrader")
    from attncourse.course.nbgrader_source import write_course

    write_course([], tmp_path)
    source = (tmp_path / "nbgrader_config.py").read_text()
    # Recorded by monkeypatch whether or not it was set, so that what the config sets is
    # undone after the test (delenv of an unset variable records nothing).
    monkeypatch.setenv(NO_TRAINING_ENV, "0")
    for argv, expected in ((["nbgrader", "autograde", "06_transformer"], "1"),
                           (["nbgrader", "generate_assignment", "06_transformer"], None)):
        os.environ.pop(NO_TRAINING_ENV, None)
        monkeypatch.setattr(sys, "argv", argv)
        exec(compile(source, "nbgrader_config.py", "exec"), {"get_config": lambda: _Config()})  # noqa: S102
        assert os.environ.get(NO_TRAINING_ENV) == expected, argv


class _Config:
    """Enough of traitlets' config object for ``nbgrader_config.py`` to run."""

    def __getattr__(self, name):
        value = _Config()
        object.__setattr__(self, name, value)
        return value


@pytest.mark.parametrize("content", ["[1]", '{"04_self_attention": "abc"}', '{"x": null}', '{"x": 5}', "[]"])
def test_a_forged_prepared_json_is_one_line(tmp_path, capsys, content):
    # Issue 64: entries of the wrong type ended in AttributeError on .get.
    from attncourse.course.prepare import main

    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "prepared.json").write_text(content)
    assert main(["01_seq2seq_bottleneck", "--runs", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attncourse: error: ") and err.count("\n") == 1 and "delete it" in err, err


def test_runs_that_is_a_file_names_the_variable(tmp_path, capsys, monkeypatch):
    from attncourse.course.prepare import main

    runs = tmp_path / "runs"
    runs.write_text("not a folder")
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(runs))
    assert main(["01_seq2seq_bottleneck"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "$ATTNCOURSE_RUNS" in err and "is a file" in err, err


_CHAPTER = "---\n{front}jupytext:\n  formats: md:myst\n  text_representation:\n    extension: .md\n" \
           "    format_name: myst\nkernelspec:\n{kernel}  language: python\n  name: python3\n---\n\n" \
           "# A chapter\n\n```{{code-cell}} ipython3\n{code}\n```\n"


@pytest.mark.parametrize("front, kernel, code, words", [
    ("tag: !!python/object:os.system x\n", "  display_name: Python 3\n", "1", "cannot be read as a chapter"),
    ("", "", "1", "'display_name' is a required property)"),
    ("", "  display_name: Python 3\n", "raise ValueError('first line\\nsecond line')",
     "ValueError: first line / second line"),
], ids=["yaml-tag", "no-display-name", "a-multi-line-error"])
def test_a_chapter_that_cannot_run_is_one_line(tmp_path, capsys, monkeypatch, front, kernel, code, words):
    # Issue 64: a YAML tag (ConstructorError) and a kernelspec without display_name
    # (NotebookValidationError) were tracebacks; a failing cell kept only its last line.
    from attncourse.course.prepare import main

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "99_chapter.md").write_text(_CHAPTER.format(front=front, kernel=kernel, code=code))
    status = main(["99_chapter", "--runs", str(tmp_path / "runs"), "--notebooks", str(notebooks)])
    err = capsys.readouterr().err
    assert status in (1, 2) and err.startswith("attncourse: error: ") and err.count("\n") == 1, err
    assert words in err, err
