"""Named experiments: task loading, length filters, and train-once-then-load runs."""

import pytest
import torch

from attncourse.train.experiment import Experiment, load_task, run_experiment, seconds_to_reach, shorter_than

TINY = Experiment(n_train=200, n_valid=40, n_test=40, epochs=2, emb_dim=8, hidden_dim=16)


def test_load_task_sizes_and_errors():
    splits = load_task("numbers-en-de", n_train=50, n_valid=10, n_test=20)
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (50, 10, 20)
    assert load_task("dates", n_train=5, n_valid=5, n_test=5).train.level == "char"
    with pytest.raises(ValueError, match="unknown task 'numbers-en-xx'"):
        load_task("numbers-en-xx")
    with pytest.raises(ValueError, match="numbers tasks only"):
        load_task("dates", max_value=10)


def test_shorter_than_keeps_exactly_the_short_pairs():
    data = load_task("numbers-en-fr", n_train=300, n_valid=10, n_test=10).train
    short = shorter_than(data, 5)
    assert all(len(src) <= 5 for src, _ in short.pairs)
    assert len(short) == sum(len(src) <= 5 for src, _ in data.pairs) > 0


def test_name_changes_with_every_field():
    assert TINY.name != Experiment(**{**TINY.__dict__, "seed": 1}).name
    assert TINY.name.startswith("numbers-en-fr/bahdanau-all-h16-")
    assert "rnn-upto5" in Experiment(attention=None, max_train_src_len=5).name


def test_second_run_loads_the_finished_run_without_training(tmp_path):
    torch.set_num_threads(1)
    first = run_experiment(TINY, progress=False, out_dir=tmp_path)
    again = run_experiment(TINY, progress=False, out_dir=tmp_path)
    assert again.result.history == first.result.history
    assert all(torch.equal(a, b) for a, b in zip(first.model.parameters(), again.model.parameters()))
    assert again.result.wall_time < first.result.wall_time


def test_seconds_to_reach():
    history = [{"seconds": 2.0, "valid_exact_match": 0.5}, {"seconds": 3.0, "valid_exact_match": 0.99}]
    assert seconds_to_reach(history, 0.98) == 5.0
    assert seconds_to_reach(history, 0.4) == 2.0
    assert seconds_to_reach(history, 0.999) is None
