"""The chapters' MyST reads in JupyterLab (jupyterlab-myst) as well as in the book.

jupyterlab-myst renders each markdown cell on its own, without the book's
project: a ``{doc}`` role becomes a link to a missing ``/files/`` path, and a
reference to a figure's ``name`` (kept in its code cell's metadata) finds
nothing. Links between chapters are Markdown links ``[text](file.md)``, which
the book resolves as document references and JupyterLab opens as notebooks.
``tests/browser/test_lab.py`` checks the rendering itself in a browser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))
#: Roles that JupyterLab cannot resolve: {doc}, and {ref}/{numref} to a figure's name.
UNRESOLVED = re.compile(r"\{doc\}`[^`]*`|\{(?:ref|numref)\}`[^`]*<?fig-[^`]*`")
#: A Markdown link to a local .md file: [text](path.md) or [text](path.md#anchor).
MD_LINK = re.compile(r"\]\(([^)\s:]+\.md)(?:#[^)]*)?\)")


def test_there_are_chapters():
    assert len(CHAPTERS) >= 8


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_uses_no_role_jupyterlab_cannot_resolve(chapter):
    found = UNRESOLVED.findall(chapter.read_text(encoding="utf-8"))
    assert not found, f"{chapter.name}: write [text](file.md) links instead of {found[:3]}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_links_between_chapters_point_at_files(chapter):
    targets = MD_LINK.findall(chapter.read_text(encoding="utf-8"))
    missing = [target for target in targets if not (chapter.parent / target).is_file()]
    assert not missing, f"{chapter.name}: links to missing files {missing}"


def test_the_patterns_catch_what_they_should():
    assert UNRESOLVED.findall("see {doc}`chapter 4 <04_self_attention>` and {numref}`fig-sa-step-score`")
    assert not UNRESOLVED.findall("[chapter 4](04_self_attention.md) and {cite}`vaswani2017attention`")
    assert MD_LINK.findall("[a](04_self_attention.md) [b](../book/references.md#top) [c](https://x.org/a.md)") \
        == ["04_self_attention.md", "../book/references.md"]
