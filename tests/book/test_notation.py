"""One notation for the whole book (book/notation.md): the rules a program can check.

The page fixes one meaning per symbol. Here: the page is in the book and names the
symbols it reserves; from chapter 4 on no formula multiplies a matrix by a column vector
(vectors are rows, ``x_i W^Q``); ``d_model`` and ``d_ff`` have one spelling; the letters
whose second meaning was removed (ALiBi's slope ``m_h``, an RMSNorm gain ``g``) stay
removed.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "book" / "notation.md"
CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))
#: Chapters 1-3 rebuild recurrent models and keep their papers' column vectors.
ROW_CHAPTERS = [p for p in CHAPTERS if p.name[:2] >= "04"]
MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$\n]+)\$", re.S)
#: A weight matrix followed by a vector: W^Q x, W_a s, W_{hr} h (a column vector).
COLUMN = re.compile(r"W(?:\^|_)(?:\{[^}]*\}|\\?[A-Za-z]+)\s*(?:\\[,;]\s*)?\(?\s*"
                    r"(?:x|h|q|k|v|s|\\bar\s*h)(?![A-Za-z])")


def formulas(path: Path) -> list[tuple[int, str]]:
    """Each ``$...$`` or ``$$...$$`` of ``path`` with its line."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1) or m.group(2))
            for m in MATH.finditer(text)]


def test_the_page_is_in_the_book_and_reserves_its_symbols():
    assert "file: book/notation" in (ROOT / "_toc.yml").read_text()
    page = PAGE.read_text(encoding="utf-8")
    for symbol in ("$h$", "$g$", "$d_k$", "$d_\\text{model}$", "$d_\\text{ff}$", "$N$",
                   "$L$", "$s_r$", "$\\gamma$", "$\\Delta$", "$W^Q, W^K, W^V, W^O$"):
        assert f"| {symbol}" in page, f"the notation page does not define {symbol}"


def test_the_column_pattern_finds_what_it_should():
    assert COLUMN.search(r"W_{ir} x + b") and COLUMN.search(r"h_t^\top W_a \bar h_s")
    assert COLUMN.search(r"W^Q x_i") and COLUMN.search(r"W_a s_{i-1} + U_a h_j")
    assert not COLUMN.search(r"x_i W^Q") and not COLUMN.search(r"Q = X W^Q, W^O")
    assert not COLUMN.search(r"W_\text{gate}")


@pytest.mark.parametrize("chapter", ROW_CHAPTERS, ids=lambda p: p.stem)
def test_vectors_are_rows_from_chapter_4_on(chapter):
    columns = [(line, f) for line, f in formulas(chapter) if COLUMN.search(f)]
    assert not columns, f"{chapter.name}: column-vector products {columns} (write x W)"


@pytest.mark.parametrize("path", CHAPTERS + [PAGE], ids=lambda p: p.stem)
def test_one_spelling_and_no_second_meanings(path):
    text = path.read_text(encoding="utf-8")
    for wrong, right in (("d_{model}", "d_\\text{model}"), ("d_{ff}", "d_\\text{ff}"),
                         ("d_{\\text{model}}", "d_\\text{model}")):
        assert wrong not in text, f"{path.name}: {wrong} (the book writes {right})"
    assert "$m_h" not in text, f"{path.name}: ALiBi's slope is s_r (m is RoPE's position)"
    assert not re.search(r"gain \$g\$", text), f"{path.name}: a gain is gamma; g counts heads"


#: Capital letters the page reserves, with the code name their value must come from (or a
#: number, as chapter 11's ``N = 30`` layers): a chapter's code that binds the letter to
#: anything else gives it a second meaning (issue 64: chapter 14 bound L, the page's context
#: length, to its decay matrix).
RESERVED_IN_CODE = {"L": "context", "N": "num_layers"}


def letter_bindings(source: str) -> list[tuple[str, str]]:
    """(letter, value's source) of each top-level ``L = ...`` / ``N = ...`` (tuples too)."""
    import ast

    found = []
    tree = ast.parse(source)
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            values = (node.value.elts if isinstance(target, ast.Tuple)
                      and isinstance(node.value, ast.Tuple) else [node.value] * len(names))
            for name, value in zip(names, values):
                if isinstance(name, ast.Name) and name.id in RESERVED_IN_CODE:
                    found.append((name.id, ast.get_source_segment(source, value) or ""))
    return found


def test_the_letter_check_sees_a_second_meaning():
    assert letter_bindings("L, FAR = BASE.context, 8\nN = cfg.num_layers\n") == [
        ("L", "BASE.context"), ("N", "cfg.num_layers")]
    assert letter_bindings("L = torch.ones(4, 4).tril()\n") == [("L", "torch.ones(4, 4).tril()")]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_a_reserved_letter_keeps_its_meaning_in_the_code(chapter):
    import jupytext

    for cell in jupytext.read(chapter).cells:
        if cell.cell_type != "code":
            continue
        code = "\n".join(line for line in cell.source.splitlines()
                         if not line.lstrip().startswith(("%", "!")))
        for letter, value in letter_bindings(code):
            assert RESERVED_IN_CODE[letter] in value or value.replace("_", "").isdigit(), (
                f"{chapter.stem}: {letter} = {value} (the page's {letter} is "
                f"`{RESERVED_IN_CODE[letter]}`)")


def test_the_page_names_the_image_letters_and_every_chapter_with_its_own():
    page = PAGE.read_text(encoding="utf-8")
    for symbol in ("$H$", "$W$", "$p$"):
        assert symbol in page, f"the notation page does not define {symbol}"
    table = page.split("## Where a chapter keeps its paper's letters")[1]
    for chapter in ("13", "14"):
        assert f"\n| {chapter} |" in table, f"chapter {chapter} is not in the page's table"
