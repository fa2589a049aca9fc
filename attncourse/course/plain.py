"""The chapters' MyST markup as plain Markdown, for the handed-out notebooks.

Classic Notebook, a JupyterHub without jupyterlab-myst and nbgrader's HTML feedback render
Markdown only. Every markdown cell is rewritten: an ``{exercise}`` becomes ``### Exercise
N: title`` (the instructor edition keeps its label), a solution region ``#### Solution``,
any other directive a quoted block under a bold title; ``{cite}`` an author-year citation
and a *Works cited* list (``book/references.bib``); a link to a chapter's ``.md`` its
``.ipynb``, to a book page its text; ``{ref}``, ``{numref}`` and ``[](#label)`` the title
of their target; labels and directive options are dropped. Code cells are left alone.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from pathlib import Path

import latexcodec  # noqa: F401 - registers the "ulatex" codec

ROOT = Path(__file__).resolve().parents[2]
BIBLIOGRAPHY = ROOT / "book" / "references.bib"

_FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[a-zA-Z0-9_-]+)\}\s*(?P<arg>.*)$")
_OPTION = re.compile(r"^:[a-zA-Z_-]+:(\s.*)?$")
_TARGET = re.compile(r"^\([A-Za-z0-9_:-]+\)=\s*$")
_CITE = re.compile(r"(?P<open>\()?\{cite(?::[a-z]+)?\}`(?P<keys>[^`]+)`")
_LINK = re.compile(r"\[([^\]]+)\]\((?![a-z]+:)([^)\s#]+)\.md(#[^)\s]*)?\)")
_ROLE = re.compile(r"\{(?:doc|ref|numref|eq|term|download)\}`(?:([^`<]*?)\s*<[^`>]*>|([^`]*))`")
#: A reference to a label: ``{ref}`label``` or ``{numref}`label``` (no text of its own).
_LABEL_ROLE = re.compile(r"\{(?:ref|numref)\}`([A-Za-z0-9_:-]+)`")
#: A link to a label of the book, ``[text](#label)`` or ``[](#label)``.
_ANCHOR = re.compile(r"\[([^\]]*)\]\(#([A-Za-z0-9_:-]+)\)")
_TARGET_LABEL = re.compile(r"^\(([A-Za-z0-9_:-]+)\)=\s*$")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
_NAME = re.compile(r"^\s*:?(?:label|name):\s*([A-Za-z0-9_:-]+)\s*$")
_MATH_ROLE = re.compile(r"\{math\}`([^`]*)`")
#: What is left of MyST if a rewrite missed something (tests look for these).
LEFTOVERS = re.compile(r"\{(?:exercise|solution|solution-start|solution-end|admonition|cite[a-z:]*|"
                       r"doc|ref|numref|eq|math|note|tip|warning|figure|margin)\}|^:label:|"
                       r"^\([A-Za-z0-9_:-]+\)=\s*$", re.M)


def targets(sources: list[str], numbered: bool = True) -> dict[str, str]:
    """``{label: title}`` of every target in ``sources``, gathered first since a reference may
    point further down: a ``(label)=`` names the heading after it, a figure its caption, an
    exercise "exercise N (title)" (``numbered=False``: its title only).
    """
    found: dict[str, str] = {}
    exercises = 0
    for source in sources:
        lines = source.split("\n")
        for i, line in enumerate(lines):
            target = _TARGET_LABEL.match(line.strip())
            if target is not None:
                after = next((x for x in lines[i + 1:] if x.strip()), "")
                heading = _HEADING.match(after.strip())
                if heading is not None:
                    found.setdefault(target.group(1), heading.group(1))
                continue
            fence = _FENCE.match(line.strip())
            if fence is None or fence.group("name") not in ("exercise", "figure"):
                continue
            name, arg = fence.group("name"), fence.group("arg").strip()
            exercises += name == "exercise"
            body = []
            for x in lines[i + 1:]:
                if x.strip() == fence.group("fence"):
                    break
                body.append(x)
            label = next((m.group(1) for m in map(_NAME.match, body) if m), "")
            if not label:
                continue
            if name == "exercise":
                found.setdefault(label, str(exercises) if numbered or not arg else arg)
            else:
                caption = next((x.strip() for x in body
                                if x.strip() and not _OPTION.match(x.strip())), label)
                found.setdefault(label, caption)
    return found


_BOOK_TARGETS: dict[str, str] | None = None


def book_targets() -> dict[str, str]:
    """The targets of every chapter in ``notebooks/`` and every page in ``book/`` (read
    once), for references between them; an exercise there is named by its title (its
    number is that chapter's).
    """
    global _BOOK_TARGETS
    if _BOOK_TARGETS is None:
        _BOOK_TARGETS = {}
        pages = sorted((ROOT / "notebooks").glob("*.md")) + sorted((ROOT / "book").glob("*.md"))
        for path in pages:
            found = targets([path.read_text(encoding="utf-8")], numbered=False)
            for label, title in found.items():
                _BOOK_TARGETS.setdefault(label, title)
    return _BOOK_TARGETS


def _latex_text(value: str) -> str:
    """``Kaiser, {\\L}ukasz`` as plain text: LaTeX accents decoded, braces dropped."""
    try:
        value = codecs.decode(value, "ulatex")
    except ValueError:
        pass
    return value.replace("{", "").replace("}", "")


@dataclass
class Entry:
    """One bibliography entry: enough to cite it (authors, year) and to list it."""

    key: str
    last_names: list[str]
    year: str
    title: str
    venue: str

    def citation(self) -> str:
        """``Vaswani et al., 2017``; ``Bahdanau and Cho, 2015``; ``Xu, 2015``."""
        names = self.last_names
        who = (names[0] if len(names) == 1 else f"{names[0]} and {names[1]}" if len(names) == 2
               else f"{names[0]} et al.") if names else self.key
        return f"{who}, {self.year}"

    def reference(self) -> str:
        """The entry in the *Works cited* list."""
        names = self.last_names
        who = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)
        venue = f" *{self.venue}*." if self.venue else ""
        return f"{who} ({self.year}). {self.title}.{venue}"


def read_bibliography(path: Path = BIBLIOGRAPHY) -> dict[str, Entry]:
    """``{key: Entry}`` of a BibTeX file (empty if it does not exist)."""
    if not path.exists():
        return {}
    from pybtex.database import parse_file

    entries = {}
    for key, item in parse_file(str(path), bib_format="bibtex").entries.items():
        people = item.persons.get("author", [])
        last = [_latex_text(" ".join(p.prelast_names + p.last_names)) for p in people]
        fields = item.fields
        venue = next((fields[f] for f in ("booktitle", "journal", "publisher", "howpublished", "note")
                      if f in fields), "")
        entries[key] = Entry(key, last, fields.get("year", "n.d."), _latex_text(fields.get("title", "")),
                             _latex_text(venue))
    return entries


@dataclass
class Rewriter:
    """Rewrites one notebook's markdown cells, given the bibliography (:func:`read_bibliography`)
    and the stems of the chapters handed out with it; remembers what it cited and numbered.
    """

    bibliography: dict[str, Entry]
    chapters: set[str]
    cited: list[str] = field(default_factory=list)
    exercises: int = 0
    #: ``{label: title}`` the references are rewritten with (:func:`targets`).
    titles: dict[str, str] = field(default_factory=dict)
    #: Keep an exercise's label in its heading (the instructor edition).
    labels: bool = True

    def cite(self, match: re.Match) -> str:
        """``(Author, year; ...)``; inside parentheses already open, without a second pair."""
        parts = []
        before = match.string[max(0, match.start() - 30):match.start()]
        for key in (k.strip() for k in match.group("keys").split(",")):
            entry = self.bibliography.get(key)
            if key not in self.cited:
                self.cited.append(key)
            # "Vaswani et al. {cite}`...`" names the authors already: the year is enough.
            named = entry is not None and entry.last_names and entry.last_names[0] in before
            parts.append(entry.year if named else entry.citation() if entry else key)
        if match.group("open"):
            return "(" + "; ".join(parts)
        return "(" + "; ".join(parts) + ")"

    def link(self, match: re.Match) -> str:
        text, target = match.group(1), match.group(2)
        stem = Path(target).name
        if "/" not in target and stem in self.chapters:
            return f"[{text}]({stem}.ipynb)"
        return f"{text} (in the course's book)"

    def title(self, label: str) -> str:
        """What a reference to ``label`` reads as: its target's title, plain Markdown.

        A label found nowhere is kept as it is (the leftovers test then shows it).
        """
        title = self.titles.get(label)
        if title is None:
            title = book_targets().get(label, label)
        return _ROLE.sub(lambda m: (m.group(1) or m.group(2) or "").strip(),
                         _MATH_ROLE.sub(lambda m: f"${m.group(1)}$", title))

    def inline(self, text: str) -> str:
        text = _CITE.sub(self.cite, text)
        text = _LINK.sub(self.link, text)
        text = _ANCHOR.sub(lambda m: m.group(1) or self.title(m.group(2)), text)
        text = _LABEL_ROLE.sub(lambda m: self.title(m.group(1)), text)
        text = _MATH_ROLE.sub(lambda m: f"${m.group(1)}$", text)
        return _ROLE.sub(lambda m: (m.group(1) or m.group(2) or "").strip(), text)

    def directive(self, name: str, arg: str, body: list[str]) -> list[str]:
        """A directive's replacement lines (``body`` already rewritten, options dropped)."""
        label = next((line.split(":", 2)[2].strip() for line in body
                      if line.strip().startswith(":label:")), "")
        content = [line for line in body if not _OPTION.match(line.strip())]
        while content and not content[0].strip():
            content.pop(0)
        content = self.block(content)
        if name == "exercise":
            self.exercises += 1
            title = f"### Exercise {self.exercises}" + (f": {self.inline(arg)}" if arg else "")
            shown = f" ({label})" if label and self.labels else ""
            return [title + shown, "", *content]
        if name in ("solution", "solution-start"):
            return ["#### Solution", "", *content]
        if name == "solution-end":
            return []
        title = self.inline(arg) or name.capitalize()
        return [f"> **{title}**", ">", *[f"> {line}".rstrip() for line in content]]

    def block(self, lines: list[str]) -> list[str]:
        """Rewrite a run of markdown lines, directives included (nested ones too)."""
        out: list[str] = []
        pending: list[str] = []  # plain lines, rewritten together: a link may span two

        def flush() -> None:
            if pending:
                out.extend(self.inline("\n".join(pending)).split("\n"))
                pending.clear()

        i = 0
        while i < len(lines):
            line = lines[i]
            match = _FENCE.match(line.strip())
            if match is None:
                if not _TARGET.match(line.strip()):
                    pending.append(line)
                i += 1
                continue
            flush()
            fence = match.group("fence")
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), len(lines))
            out += self.directive(match.group("name"), match.group("arg").strip(), lines[i + 1:end])
            i = end + 1
        flush()
        return out

    def markdown(self, source: str) -> str:
        """One markdown cell as plain Markdown."""
        return "\n".join(self.block(source.split("\n"))).strip("\n")

    def works_cited(self) -> str:
        """The *Works cited* cell: every entry cited so far, in order of first citation."""
        items = [f"- {self.bibliography[key].reference()}" if key in self.bibliography else f"- {key}"
                 for key in self.cited]
        return "\n".join(["## Works cited", "", *items])


def plain_cells(cells: list, chapters: set[str] | None = None,
                bibliography: dict[str, Entry] | None = None,
                labels: bool = True) -> list:
    """``cells`` (nbformat cells, changed in place) with plain Markdown, plus *Works cited*.

    ``chapters`` defaults to the stems of the course's ``notebooks/``, ``bibliography`` to
    :data:`BIBLIOGRAPHY`; ``labels`` keeps each exercise's label in its heading (the
    instructor edition), off for the student edition.
    """
    import nbformat

    if chapters is None:
        chapters = {p.stem for p in (ROOT / "notebooks").glob("*.md")}
    if bibliography is None:
        bibliography = read_bibliography()
    rewriter = Rewriter(bibliography, chapters, labels=labels)
    rewriter.titles = targets([c.source for c in cells if c.cell_type == "markdown"])
    for cell in cells:
        if cell.cell_type == "markdown":
            cell.source = rewriter.markdown(cell.source)
    if rewriter.cited:
        cells.append(nbformat.v4.new_markdown_cell(rewriter.works_cited()))
    return cells


__all__ = ["BIBLIOGRAPHY", "LEFTOVERS", "Entry", "Rewriter", "book_targets",
           "plain_cells", "read_bibliography", "targets"]
