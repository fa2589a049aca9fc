"""book/_ext/execute_chapters.py: how the book build runs the chapters in parallel."""

import importlib.util
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]


def test_chapter_kernels_share_the_cores(monkeypatch):
    """book/_ext/execute_chapters.py: N kernels at once get cores // N threads each."""
    path = CHECKOUT / "book" / "_ext" / "execute_chapters.py"
    if not path.exists():
        pytest.skip("an installed package, not a checkout")
    spec = importlib.util.spec_from_file_location("execute_chapters", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module.os, "cpu_count", lambda: 8)
    for name in module.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    module.share_threads(2)
    assert {module.os.environ[name] for name in module.THREAD_VARIABLES} == {"4"}
    monkeypatch.setenv("OMP_NUM_THREADS", "3")     # the user's own setting stays
    monkeypatch.delenv("MKL_NUM_THREADS")
    module.share_threads(8)
    assert module.os.environ["OMP_NUM_THREADS"] == "3"
    assert module.os.environ["MKL_NUM_THREADS"] == "1"
