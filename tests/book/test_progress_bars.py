"""Progress bars in the static book: one line of final state, never a frozen first frame.

A page keeps a cell's outputs as they were when the cell ended. A tqdm widget left only
its text fallback there, its first frame (``0%| | 0/300 [00:00<?, ?step/s]``), under every
training cell of the book. While the book is built (``ATTNCOURSE_STATIC_EXPLORERS=1``) a
bar of :func:`attncourse.runtime.progress_bar` prints its final state once instead.
"""

import re

import pytest
import torch

import attncourse.runtime as runtime
from attncourse.runtime import BOOK_ENV, BookBar, progress_bar, quiet_progress

FINISHED = re.compile(r"^train: 100%\|█+\| 30/30 \[\d\d:\d\d<00:00, +[\d.]+(step/s|s/step)\]$")


@pytest.fixture
def book(monkeypatch):
    monkeypatch.setenv(BOOK_ENV, "1")
    monkeypatch.delenv("TQDM_DISABLE", raising=False)


def test_a_book_bar_prints_its_final_state_once_on_stdout(book, capsys):
    bar = progress_bar(total=30, desc="train", unit="step")
    assert isinstance(bar, BookBar)
    for _ in range(30):
        bar.update(1)
    assert capsys.readouterr().out == ""              # nothing drawn while it runs
    bar.close()
    bar.close()                                       # a second close prints nothing more
    out = capsys.readouterr()
    assert out.err == "" and len(out.out.splitlines()) == 1, out
    assert FINISHED.match(out.out.strip()), out.out


def test_a_book_bar_over_an_iterable_closes_itself(book, capsys):
    assert sum(progress_bar(range(30), desc="train", unit="step")) == 435
    assert FINISHED.match(capsys.readouterr().out.strip())


def test_a_bar_that_vanishes_when_done_or_is_off_prints_nothing_in_the_book(book, capsys):
    list(quiet_progress(range(5)))
    list(progress_bar(range(5), progress=False))
    assert capsys.readouterr() == ("", "")


def test_outside_the_book_the_bar_is_tqdm_auto(monkeypatch, capsys):
    monkeypatch.delenv(BOOK_ENV, raising=False)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    bar = progress_bar(range(3), desc="train")
    assert type(bar) is runtime.tqdm and not isinstance(bar, BookBar)
    list(bar)
    assert "3/3" in capsys.readouterr().err            # a terminal's bar, on stderr


@pytest.mark.parametrize("in_book", [False, True])
def test_a_training_answers_bar_is_no_hand_off_in_the_book_or_out(in_book, monkeypatch, capsys):
    # chapter 7b's reference loop runs under check_training's guard in the book build too,
    # where tqdm calls the BookBar's own methods after progress_bar has returned
    from attncourse.checks.guard import watching
    from attncourse.checks.hand_offs import HAND_OFFS

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    if in_book:
        monkeypatch.setenv(BOOK_ENV, "1")
    else:
        monkeypatch.delenv(BOOK_ENV, raising=False)

    def my_train(steps):
        return [step for step in progress_bar(range(steps), desc="my_train", unit="step")]

    with watching(HAND_OFFS["check_training"], my_train) as seen:
        assert my_train(5) == list(range(5))
    assert seen == []
    with watching(HAND_OFFS["check_training"], my_train) as seen:
        runtime.describe_device(torch.device("cpu"))       # any other package function
    assert [hand_off.kind for hand_off in seen] == ["package"]


class _Events:
    def __init__(self):
        self.hooks = {}

    def register(self, name, fn):
        self.hooks.setdefault(name, []).append(fn)

    def trigger(self, name):
        for fn in self.hooks.get(name, []):
            fn(None)


@pytest.fixture
def kernel(book, monkeypatch):
    """A book build inside a fake IPython kernel: the cell ends when the test says."""
    events = _Events()
    monkeypatch.setattr(runtime, "_ipython", lambda: type("Shell", (), {"events": events})())
    monkeypatch.setattr(runtime, "_CELL_LOOPS", runtime._CellLoops())
    return events


def test_a_cell_of_many_trainings_shows_one_line_when_it_ends(kernel, capsys):
    # issue 64: chapter 13's cell of 18 trainings left 18 finished bars above its results
    for seed in range(3):
        list(progress_bar(range(30), desc=f"ViT, seed {seed}", unit="step", leave=True))
    runtime.announce_loaded("CNN, seed 0", 300, "steps")
    assert capsys.readouterr().out == ""              # nothing until the cell ends
    kernel.trigger("post_run_cell")
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1, out
    assert re.fullmatch(r"4 training loops \(ViT, seed 0 \.\.\. CNN, seed 0\): 3 trained "
                        r"\(90 steps in \d\d:\d\d\), 1 loaded from their checkpoints", out[0])
    kernel.trigger("post_run_cell")                   # the next cell starts afresh
    assert capsys.readouterr().out == ""


def test_a_cell_of_one_training_keeps_the_bars_own_line(kernel, capsys):
    list(progress_bar(range(30), desc="train", unit="step", leave=True))
    kernel.trigger("post_run_cell")
    assert FINISHED.match(capsys.readouterr().out.strip())


def test_outside_the_book_a_loaded_run_says_so_at_once(monkeypatch, capsys):
    monkeypatch.delenv(BOOK_ENV, raising=False)
    runtime.announce_loaded("mlm", 600, "steps")
    assert capsys.readouterr().out == "mlm: trained already (600 steps), loaded from its checkpoint\n"


@pytest.mark.parametrize("value, on", [("", False), ("0", False), (" 0 ", False), ("false", False),
                                       ("No", False), ("OFF", False), ("1", True), ("yes", True),
                                       (" 1\n", True), ("true", True)])
def test_one_reader_of_the_courses_on_off_variables(monkeypatch, value, on):
    # issue 62: "set and not 0" was written three times, and the copies differed
    monkeypatch.setenv("ATTNCOURSE_X", value)
    assert runtime.env_flag("ATTNCOURSE_X") is on
    monkeypatch.setenv(BOOK_ENV, value)
    assert runtime.book_build() is on
    monkeypatch.delenv("ATTNCOURSE_X")
    assert runtime.env_flag("ATTNCOURSE_X") is False
