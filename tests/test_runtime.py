"""The run's surroundings (attncourse.runtime): the trained-model folder and the device."""

from pathlib import Path

import pytest
import torch

import attncourse
from attncourse.runtime import pick_device, runs_dir

CHECKOUT = Path(attncourse.__file__).resolve().parent.parent


def test_runs_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path / "runs"))
    assert runs_dir("a/b") == tmp_path / "runs" / "a" / "b"
    assert (tmp_path / "runs" / "a" / "b").is_dir()


@pytest.mark.skipif(not (CHECKOUT / "notebooks").is_dir(), reason="an installed package, not a checkout")
def test_runs_dir_defaults_to_the_checkouts_build_folder(monkeypatch):
    monkeypatch.delenv("ATTNCOURSE_RUNS", raising=False)
    assert runs_dir() == CHECKOUT / "_build" / "runs"


def test_pick_device_takes_the_cpu_and_names_bad_devices():
    assert pick_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="'gpu' is not a device"):
        pick_device("gpu")


def test_describe_device_counts_the_cpu_threads():
    from attncourse.runtime import describe_device

    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert describe_device(torch.device("cpu")) == "cpu (1 thread)"
        torch.set_num_threads(2)
        assert describe_device(torch.device("cpu")) == "cpu (2 threads)"
    finally:
        torch.set_num_threads(previous)

