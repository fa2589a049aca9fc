"""A fit without a folder, kept while a course is prepared and loaded while it is graded."""

from __future__ import annotations

import importlib

import pytest
import torch

from attncourse.runtime import NO_TRAINING_ENV, UnpreparedRun
from attncourse.train.store import FIT_CACHE_ENV
from tests.train.test_fit import (
    assert_same_weights,
    config,
    make_data,
    new_model,
    run,
    without_timings,
)

# importlib: the package re-exports the function fit, which shadows the module's name
fit_module = importlib.import_module("attncourse.train.fit")


@pytest.fixture(scope="module")
def data():
    return make_data()


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv(FIT_CACHE_ENV, "0")
    monkeypatch.setenv(NO_TRAINING_ENV, "0")
    return tmp_path / "runs"


def _no_training(monkeypatch):
    def refused(*args, **kwargs):
        def epoch(*a, **k):
            raise AssertionError("a prepared fit trained again")
        return epoch
    monkeypatch.setattr(fit_module, "seq2seq_epoch", refused)


def test_a_readers_fit_stays_in_memory(data, runs):
    run(data, new_model(data), config(epochs=2))
    assert not list(runs.rglob("*.pt"))


def test_prepared_then_graded_the_fit_loads_the_same_run_without_training(data, runs, monkeypatch):
    monkeypatch.setenv(FIT_CACHE_ENV, "1")                       # python -m attncourse prepare
    trained_model = new_model(data)
    trained = run(data, trained_model, config(epochs=3))
    after = torch.get_rng_state()
    assert len(list(runs.glob("fits/*/checkpoint.pt"))) == 1
    monkeypatch.setenv(FIT_CACHE_ENV, "0")
    monkeypatch.setenv(NO_TRAINING_ENV, "1")                     # nbgrader autograde
    _no_training(monkeypatch)
    torch.manual_seed(123)                                        # whatever ran before
    loaded_model = new_model(data)
    loaded = run(data, loaded_model, config(epochs=3))
    assert_same_weights(trained_model, loaded_model)
    assert [without_timings(r) for r in loaded.history] == \
        [without_timings(r) for r in trained.history]
    assert loaded.best_epoch == trained.best_epoch
    assert torch.equal(torch.get_rng_state(), after)              # what the chapter draws next


@pytest.mark.parametrize("change", ["seed", "epochs", "lr", "valid"])
def test_grading_refuses_a_fit_that_was_not_prepared(data, runs, monkeypatch, change):
    monkeypatch.setenv(FIT_CACHE_ENV, "1")
    run(data, new_model(data), config(epochs=2))
    monkeypatch.setenv(FIT_CACHE_ENV, "0")
    monkeypatch.setenv(NO_TRAINING_ENV, "1")
    model = new_model(data, seed=1 if change == "seed" else 0)
    cfg = config(epochs=3 if change == "epochs" else 2, lr=2e-2 if change == "lr" else 1e-2)
    if change == "valid":
        data = {**data, "valid_batches": data["train_batches"][:1]}
    with pytest.raises(UnpreparedRun, match="prepare the chapter first"):
        run(data, model, cfg)
