"""Code lines of the chapters fit the book's code column: 88 characters.

The book's CSS (book/_ext/static/attncourse.css) makes a code column 88 characters wide at
1280 x 800, and tests/browser checks that nothing scrolls sideways there. Every chapter in
notebooks/ is checked, new ones included, so a longer line fails here rather than wrapping
in the book.
"""

from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(path.stem for path in (ROOT / "notebooks").glob("*.md"))


def test_every_chapter_is_checked():
    assert len(CHAPTERS) >= 10, CHAPTERS


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_code_lines_fit_88_characters(chapter):
    notebook = jupytext.read(ROOT / "notebooks" / f"{chapter}.md")
    long = [line for cell in notebook.cells if cell.cell_type == "code"
            for line in cell.source.splitlines() if len(line) > 88]
    assert not long, f"{chapter}: {len(long)} code lines over 88 characters: {long[:3]}"
