"""The slide decks show the chapter's figures when built from its executed notebook.

The book build leaves each executed chapter in ``_build/jupyter_execute/notebooks/``; a
deck built with it puts each section's first figure after the section's slide, embedded
in the page (the deck stays offline). Here the executed notebook is the chapter as the
book reads it with one real figure drawn into a section, so the test needs no build; the
last test reads the build's own executed chapter when one is there.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import nbformat
import pytest

from attncourse.course.editions import chapter_editions
from attncourse.course.exercises import read_chapter
from attncourse.course.slides import (
    EXECUTED,
    MAX_FIGURES,
    deck,
    executed_notebooks,
    figures,
    write_decks,
)

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "notebooks" / "04_self_attention.md"


def png() -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.imshow([[0.2, 0.8], [0.6, 0.4]])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def executed_with_a_figure(data: str) -> tuple[nbformat.NotebookNode, str]:
    """The chapter as the book reads it, one figure in the code cell after its second section's heading."""
    nb = read_chapter(CHAPTER)
    headings = [(i, m) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                for m in re.findall(r"^## (.+)$", c.source, re.M)]
    start, heading = headings[1]
    cell = next(c for c in nb.cells[start:] if c.cell_type == "code")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": data, "text/plain": "<Figure>"})]
    return nb, heading


def test_a_deck_built_from_an_executed_chapter_shows_its_figures(tmp_path):
    data = png()
    executed, heading = executed_with_a_figure(data)
    student, _ = chapter_editions(CHAPTER)
    plain = deck(student)
    slides = deck(student, executed)
    shown = [c for c in slides.cells if "data:image/png;base64," in c.source]
    assert len(shown) == 1 and data in shown[0].source and len(slides.cells) == len(plain.cells) + 1
    # The figure's slide comes right after its section's slide.
    at = slides.cells.index(shown[0])
    assert slides.cells[at - 1].source.startswith(f"## {heading}") and shown[0].source.startswith(f"## {heading}")
    assert not [c for c in plain.cells if "data:image" in c.source]
    (page,) = write_decks({CHAPTER.stem: student}, tmp_path, {CHAPTER.stem: executed})
    html = page.read_text(encoding="utf-8")
    assert html.count('src="data:image/png;base64,') == 1 and data[:200] in html


def test_a_deck_shows_one_figure_a_section_and_a_bounded_number(tmp_path):
    data = png()
    executed = read_chapter(CHAPTER)
    for cell in executed.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": data})]
    student, _ = chapter_editions(CHAPTER)
    sections = len(figures(executed))
    shown = [c for c in deck(student, executed).cells if "data:image" in c.source]
    assert 1 <= len(shown) <= min(MAX_FIGURES, sections)


def test_executed_chapters_are_read_from_the_build_cache_or_a_folder(tmp_path):
    from jupyter_cache import get_cache

    data = png()
    executed, _ = executed_with_a_figure(data)
    source = tmp_path / "notebooks" / "04_self_attention.ipynb"
    source.parent.mkdir()
    nbformat.write(executed, source)
    cache = tmp_path / EXECUTED[1]
    get_cache(str(cache)).cache_notebook_file(str(source), check_validity=False)
    chapters = {name: read_chapter(ROOT / "notebooks" / f"{name}.md")
                for name in ("04_self_attention", "05_multihead_positional")}
    found = executed_notebooks(tmp_path, chapters)
    assert list(found) == ["04_self_attention"] and figures(found["04_self_attention"])
    assert list(executed_notebooks(cache, chapters, here=True)) == ["04_self_attention"]
    assert list(executed_notebooks(source.parent, chapters, here=True)) == ["04_self_attention"]
    # A chapter edited since it ran (other code) gets no figures from that run.
    edited = {"04_self_attention": read_chapter(CHAPTER)}
    next(c for c in edited["04_self_attention"].cells if c.cell_type == "code").source += "\n# edited"
    assert executed_notebooks(tmp_path, edited) == {}


BUILT = executed_notebooks(ROOT, {CHAPTER.stem: read_chapter(CHAPTER)})


@pytest.mark.skipif(not BUILT, reason="no book build here (make book)")
def test_the_built_books_chapter_gives_its_deck_figures():
    executed = BUILT[CHAPTER.stem]
    student, _ = chapter_editions(CHAPTER)
    assert [c for c in deck(student, executed).cells if "data:image" in c.source]


def test_decks_show_the_defining_equations_a_chapter_writes_inline():
    student, _ = chapter_editions(ROOT / "notebooks" / "02_bahdanau_attention.md")
    slides = "\n".join(c.source for c in deck(student).cells)
    assert r"$$e_{ij} = v_a^\top \tanh(W_a s_{i-1} + U_a h_j)$$" in slides
    student, _ = chapter_editions(ROOT / "notebooks" / "06_transformer.md")
    assert "$$d_\\text{model} = 128$$" not in "\n".join(c.source for c in deck(student).cells)  # a size


@pytest.mark.parametrize("chapter", sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.md")),
                         ids=lambda p: p.stem)
def test_the_title_slide_says_its_title_once_and_no_slide_ends_on_a_colon(chapter):
    # The title slide once repeated "The Transformer" (the title, then the opening
    # cell with the title again, its introduction and prerequisites) and overflowed; slides
    # ended on a sentence announcing code the slide does not show.
    student, _ = chapter_editions(chapter)
    slides = deck(student)
    first = slides.cells[0].source
    lines = first.split("\n")
    assert lines[0].startswith("# ") and sum(line.startswith("# ") for line in lines) == 1, first
    assert "**Learning goals**" in first and "**Prerequisites**" not in first
    assert len(first) < 1700, len(first)
    dangling = [cell.source[-80:] for cell in slides.cells if cell.source.rstrip().endswith(":")]
    assert not dangling, dangling
