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

ROOT = Path(__file__).resolve().parents[2]
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


def _markdown_parser():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    # myst-parser's settings for $ and $$ (its "dollarmath" extension)
    return MarkdownIt("commonmark").use(dollarmath_plugin, allow_labels=True,
                                        allow_space=True, allow_digits=True,
                                        double_inline=True)


def untypeset_maths(source: str, parser=None) -> list[tuple[int, str]]:
    """Lines whose prose, as the book's parser reads it, still holds ``$`` or a TeX command.

    A formula wrapped so that a line starts with ``+ ``, ``- `` or ``1. `` becomes a list
    item: its ``$`` is then left in the text and MathJax never sees the formula. Code
    cells and code spans are left out; directives (exercises, admonitions) are read as the
    Markdown they hold.
    """
    parser = parser or _markdown_parser()
    found = []
    for token in parser.parse(source):
        if token.type == "fence" and token.info.startswith("{") \
                and not token.info.startswith("{code-cell}"):
            inner = untypeset_maths(token.content, parser)
            found += [(token.map[0] + 1 + line, text) for line, text in inner]
        if token.type != "inline":
            continue
        for child in token.children or []:
            if child.type == "text" and re.search(r"\$|\\[A-Za-z]+", child.content):
                found.append((token.map[0] + 1, child.content))
    return found


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_every_formula_is_read_as_maths(chapter):
    text = chapter.read_text(encoding="utf-8")
    body = text.split("\n---\n", 1)[1] if text.startswith("---\n") else text
    offset = text[:len(text) - len(body)].count("\n")
    found = [(line + offset, snippet) for line, snippet in untypeset_maths(body)]
    assert not found, (f"{chapter.name}: raw TeX left in the prose (a line of a formula "
                       f"that starts with '+ ', '- ' or '1. ' is a list item): {found[:3]}")


def test_a_formula_wrapped_before_a_plus_is_found():
    assert untypeset_maths("so $S_t = a_t S_{t-1}\n+ k_t^\\top v_t$ is it\n")
    assert untypeset_maths("so $$S_t = a_t\n- b$$ is it\n")
    assert untypeset_maths("```{exercise} A\n:label: x\n\nwith $a\n1. b$\n```\n")
    assert untypeset_maths("so $S_t = a_t S_{t-1}\n   + k_t$ is it\n")    # indented too
    assert not untypeset_maths("so $S_t = a_t S_{t-1} +\nk_t$ is it, and `$HOME`\n")
    assert not untypeset_maths("$$\na\n+ b\n$$\n\n```{code-cell} ipython3\nx = '$'\n```\n")
