"""Code lines of the chapters fit the book's code column: 88 characters (issue 23, item 18).

The book's CSS (book/_ext/static/attncourse.css) makes a code column 88 characters wide at
1280 x 800, and tests/browser checks that nothing scrolls sideways there. Longer lines
would wrap; these chapters have none. The other chapters still have lines of up to 129
characters, wrapped by the CSS rather than scrolled: add each here once its lines fit.
"""

from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
WITHIN_88 = ["02_bahdanau_attention", "03_attention_family", "07_decoder_only",
             "08_attention_at_scale", "09_what_heads_learn"]


@pytest.mark.parametrize("chapter", WITHIN_88)
def test_code_lines_fit_88_characters(chapter):
    notebook = jupytext.read(ROOT / "notebooks" / f"{chapter}.md")
    long = [line for cell in notebook.cells if cell.cell_type == "code"
            for line in cell.source.splitlines() if len(line) > 88]
    assert not long, f"{chapter}: {len(long)} code lines over 88 characters: {long[:3]}"
