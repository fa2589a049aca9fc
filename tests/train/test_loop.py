"""The cached, resumable epoch loop of attncourse.train.loop."""

import io
import threading

import pytest
import torch
from tqdm import tqdm

from attncourse.train.loop import train_epochs
from attncourse.train.store import run_name


def _problem():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(64, generator=g)
    calls = []

    def build(device):
        model = torch.nn.Linear(3, 1).to(device)
        return model, torch.optim.SGD(model.parameters(), lr=0.05)

    def train_epoch(run):
        model, opt, epoch, state = run.model, run.optimizer, run.number, run.state
        calls.append(epoch)
        perm = torch.randperm(64)  # drawn from the loop's per-epoch seed
        total = 0.0
        for i in range(0, 64, 16):
            idx = perm[i:i + 16]
            loss = ((model(x[idx]).squeeze(-1) - y[idx]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        state["steps"] = state.get("steps", 0) + 4
        return {"train_loss": total / 4}

    def evaluate(model):
        return {"valid_loss": float(((model(x).squeeze(-1) - y) ** 2).mean())}

    return build, train_epoch, evaluate, calls


def test_trains_and_records_history(tmp_path):
    build, train_epoch, evaluate, calls = _problem()
    run = train_epochs("toy", {"lr": 0.05}, build, train_epoch, evaluate, 5, progress=False,
                       out_dir=tmp_path, device="cpu")
    assert calls == [1, 2, 3, 4, 5]
    assert [row["epoch"] for row in run.history] == [1, 2, 3, 4, 5]
    assert run.history[-1]["valid_loss"] < 0.5 * run.history[0]["valid_loss"]
    assert run.state == {"steps": 20}
    assert not run.model.training
    assert all(row["seconds"] > 0 for row in run.history)
    assert run.seconds == pytest.approx(sum(row["seconds"] for row in run.history))


def test_finished_run_loads_without_training(tmp_path):
    build, train_epoch, evaluate, calls = _problem()
    first = train_epochs("toy", {"lr": 0.05}, build, train_epoch, evaluate, 3, progress=False,
                         out_dir=tmp_path, device="cpu")
    calls.clear()
    again = train_epochs("toy", {"lr": 0.05}, build, train_epoch, evaluate, 3, progress=False,
                         out_dir=tmp_path, device="cpu")
    assert calls == []
    assert again.history == first.history and again.state == first.state
    assert torch.equal(again.model.weight, first.model.weight)


def test_interrupted_run_resumes_exactly(tmp_path):
    build, train_epoch, evaluate, _ = _problem()
    straight = train_epochs("toy", {"lr": 0.05}, build, train_epoch, evaluate, 4, progress=False,
                            out_dir=tmp_path / "a", device="cpu")
    train_epochs("toy", {"lr": 0.05}, build, train_epoch, evaluate, 2, progress=False,
                 out_dir=tmp_path / "b", device="cpu")
    resumed = train_epochs("toy", {"lr": 0.05}, build, train_epoch, evaluate, 4, progress=False,
                           out_dir=tmp_path / "b", device="cpu")
    assert torch.equal(resumed.model.weight, straight.model.weight)
    assert resumed.state == straight.state == {"steps": 16}
    assert [r["valid_loss"] for r in resumed.history] == [r["valid_loss"] for r in straight.history]


def test_default_folder_is_named_by_config(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path))
    build, train_epoch, evaluate, _ = _problem()
    run = train_epochs("toy/run", {"lr": 0.05}, build, train_epoch, evaluate, 1, progress=False, device="cpu")
    assert run.out_dir == tmp_path / run_name("toy/run", {"lr": 0.05})
    assert run_name("toy/run", {"lr": 0.05}) != run_name("toy/run", {"lr": 0.1})


def test_bad_input_gives_clear_errors(tmp_path):
    build, train_epoch, evaluate, _ = _problem()
    with pytest.raises(ValueError, match="epochs must be a positive int"):
        train_epochs("toy", {}, build, train_epoch, evaluate, 0, progress=False, out_dir=tmp_path)
    train_epochs("toy", {"lr": 0.05}, build, train_epoch, evaluate, 1, progress=False, out_dir=tmp_path,
                 device="cpu")
    with pytest.raises(ValueError, match="another config"):
        train_epochs("toy", {"lr": 0.1}, build, train_epoch, evaluate, 1, progress=False, out_dir=tmp_path,
                     device="cpu")
    with pytest.raises(ValueError, match="'valid_loss' must be a number"):
        train_epochs("toy", {}, build, train_epoch, lambda m: {"valid_loss": "low"}, 1, progress=False,
                     out_dir=tmp_path / "c", device="cpu")


def test_a_cached_run_asked_for_twice_at_once_trains_once(tmp_path, monkeypatch):
    # Two notebooks (here: two threads; flock locks conflict between separate opens)
    # ask for the same run in the shared cache: the second waits, then loads it.
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path))
    build, train_epoch, evaluate, calls = _problem()
    started, release = threading.Event(), threading.Event()
    runs = {}

    def slow_epoch(run):
        started.set()
        release.wait(10)
        return train_epoch(run)

    def ask(key, epoch_fn):
        runs[key] = train_epochs("toy", {"lr": 0.05}, build, epoch_fn, evaluate, 2, progress=False,
                                 device="cpu")

    first = threading.Thread(target=ask, args=("first", slow_epoch))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=ask, args=("second", train_epoch))
    second.start()
    second.join(0.5)
    assert second.is_alive(), "the second request did not wait for the run being trained"
    release.set()
    first.join(10)
    second.join(10)
    assert calls == [1, 2]
    assert runs["second"].history == runs["first"].history
    assert (runs["first"].out_dir / ".lock").is_file()


def test_early_stopping_and_the_best_epoch_come_with_the_loop(tmp_path):
    build, train_epoch, _, calls = _problem()
    weights = []

    def worse_every_epoch(model):  # validation gets worse after epoch 1: patience 1 stops after epoch 2
        weights.append(model.weight.detach().clone())
        return {"valid_loss": float(len(calls))}

    run = train_epochs("toy", {"lr": 0.05}, build, train_epoch, worse_every_epoch, 5, progress=False,
                       out_dir=tmp_path, device="cpu", score=lambda row: (-row["valid_loss"],), patience=1)
    assert calls == [1, 2] and run.stopped_early and run.best_epoch == 1
    assert torch.equal(run.model.weight, weights[0])  # the best epoch's weights, restored


def test_amp_runs_a_cached_model_under_bf16_autocast(tmp_path):
    build, _, evaluate, _ = _problem()
    dtypes = []

    def train_epoch(epoch):
        with epoch.autocast():
            dtypes.append(epoch.forward(torch.ones(2, 3)).dtype)
        loss = epoch.forward(torch.ones(2, 3)).pow(2).mean()
        epoch.step(loss)
        return {"train_loss": float(loss.detach())}

    train_epochs("toy", {"amp": "bf16"}, build, train_epoch, evaluate, 1, progress=False, out_dir=tmp_path,
                 device="cpu", amp="bf16")
    assert dtypes == [torch.bfloat16]


def _stepping_problem():
    """A model trained through ``Epoch.step``, four updates an epoch."""
    build, _, evaluate, _ = _problem()
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(2))

    def train_epoch(epoch):
        for _ in range(4):
            epoch.step((epoch.forward(x) ** 2).mean())
        return {"train_loss": 0.0}

    return build, train_epoch, evaluate


class _Bars:
    """Stands in for loop.progress_bar: records each bar's settings and its counts."""

    def __init__(self):
        self.made = []

    def __call__(self, iterable=None, *, progress=True, **kwargs):
        bar = tqdm(iterable, disable=not progress, file=io.StringIO(), **kwargs)
        counts = []
        update = bar.update

        def counted(n=1):
            update(n)
            counts.append(bar.n)
        bar.update = counted
        self.made.append((progress, kwargs, counts))
        return bar


def test_the_bar_counts_steps_and_a_finished_run_prints_one_line(tmp_path, monkeypatch, capsys):
    import attncourse.train.loop as loop_module
    bars = _Bars()
    monkeypatch.setattr(loop_module, "progress_bar", bars)
    build, train_epoch, evaluate = _stepping_problem()
    train_epochs("toy", {}, build, train_epoch, evaluate, 3, out_dir=tmp_path, device="cpu",
                 steps_per_epoch=4)
    shown, settings, counts = bars.made[-1]
    assert shown and settings["unit"] == "step" and settings["total"] == 12
    # every step, and at each epoch's end a count already there (an update of 0)
    assert counts == [1, 2, 3, 4, 4, 5, 6, 7, 8, 8, 9, 10, 11, 12, 12]
    capsys.readouterr()
    train_epochs("toy", {}, build, train_epoch, evaluate, 3, out_dir=tmp_path, device="cpu",
                 steps_per_epoch=4)
    shown, settings, counts = bars.made[-1]
    assert not shown and counts == []           # no bar frozen at 100 %: one line instead
    assert capsys.readouterr().out == "toy: trained already (12 steps), loaded from its checkpoint\n"


def test_without_steps_the_bar_counts_epochs(tmp_path, monkeypatch):
    import attncourse.train.loop as loop_module
    bars = _Bars()
    monkeypatch.setattr(loop_module, "progress_bar", bars)
    build, train_epoch, evaluate = _stepping_problem()
    train_epochs("toy", {}, build, train_epoch, evaluate, 2, out_dir=tmp_path, device="cpu")
    shown, settings, counts = bars.made[-1]
    assert settings["unit"] == "epoch" and settings["total"] == 2 and counts == [1, 2]
