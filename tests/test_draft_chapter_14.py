"""The draft of chapter 14 (notebooks/drafts/): its code runs, every assert holds, and
its code lines fit the book's 88 characters. Outside notebooks/*.md, so that the book, the
claims sweep and the editions leave it alone until it is a chapter; this test then goes."""

from pathlib import Path

import jupytext
import matplotlib

DRAFT = Path(__file__).resolve().parents[1] / "notebooks" / "drafts" / "14_attention_as_memory.md"


def test_the_draft_runs_and_its_asserts_hold():
    matplotlib.use("Agg")
    cells = [cell.source for cell in jupytext.read(DRAFT).cells if cell.cell_type == "code"]
    assert sum(source.count("assert ") for source in cells) >= 20
    namespace: dict = {}
    for number, source in enumerate(cells):
        exec(compile(source, f"{DRAFT.name}, code cell {number}", "exec"), namespace)  # noqa: S102
    assert set(namespace["recall"]) == set(namespace["RULES"])


def test_the_drafts_code_lines_fit_88_characters():
    long = [line for cell in jupytext.read(DRAFT).cells if cell.cell_type == "code"
            for line in cell.source.splitlines() if len(line) > 88]
    assert not long, long
