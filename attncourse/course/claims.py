"""``book/claims.json``: how the chapters' claims fared on other machines, read for the book.

Each chapter checks its claims with ``assert`` statements (a loss below a bound, two
implementations equal). ``make claims`` (``tools/claims.py``) executes every chapter under
a few variants of the machine (another CPU's kernels, other thread counts, another
training seed) and records, for every assert, its operands, whether it held and its
margin to the bound. This module reads that file for the book's page *How sure are these
numbers?* (``book/claims.md``) and for the freshness test (``tests/book/test_claims.py``), and
computes the digest that ties a chapter's record to its code: the SHA-256 of its code
cells' syntax trees, so that a chapter whose code changed after its sweep is known to be
stale.

Reading never fails on a missing, partial or unreadable file: the page says what it lacks.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
CLAIMS = ROOT / "book" / "claims.json"
#: How to sweep one chapter again (the freshness test and the page name it).
RERUN = "make claims CHAPTERS={chapter}"
#: Between two code cells in the text that :func:`code_digest` hashes.
CELL_SEPARATOR = "\n\n# ---- next code cell ----\n\n"


def code_digest(path: str | Path) -> str:
    """SHA-256 (hex) of what a chapter's code cells do, read by jupytext, joined in order.

    Each cell counts by its syntax tree, written back as code (``ast.unparse``; its text
    is steadier across Python versions than ``ast.dump``'s, which changed in 3.13), so comments,
    line breaks and the splitting of a string literal do not make a sweep stale
    (re-wrapping a line to fit 88 characters is not worth an hours-long sweep), while any
    change to what the code computes does. A cell Python cannot parse (an IPython magic)
    counts by its text.
    Markdown cells do not count either.
    """
    import jupytext

    notebook = jupytext.read(Path(path))
    code = CELL_SEPARATOR.join(_cell_form(cell.source) for cell in notebook.cells
                               if cell.cell_type == "code")
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def _cell_form(source: str) -> str:
    try:
        return ast.unparse(ast.parse(source))
    except SyntaxError:
        return source


def chapter_names(notebooks: Path = NOTEBOOKS) -> list[str]:
    """The chapters' names (file stems of ``notebooks/*.md``), in file order."""
    return sorted(path.stem for path in notebooks.glob("*.md"))


def load(path: Path = CLAIMS) -> dict[str, Any] | None:
    """The file's content, or None when it is missing or not a JSON object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stale_chapters(data: dict[str, Any] | None,
                   notebooks: Path = NOTEBOOKS) -> dict[str, str]:
    """``{chapter: reason}`` for each chapter in ``data`` whose record no longer fits.

    A record fits when the chapter still exists and its stored digest equals the
    :func:`code_digest` of its code now.
    """
    stale = {}
    for name, entry in ((data or {}).get("chapters") or {}).items():
        path = notebooks / f"{name}.md"
        if not path.is_file():
            stale[name] = f"{name}: swept, but notebooks/{name}.md no longer exists"
        elif not isinstance(entry, dict) or entry.get("digest") != code_digest(path):
            stale[name] = (f"{name}: its code changed after its claims were swept; "
                           f"rerun `{RERUN.format(chapter=name)}`")
    return stale


# ---- the book page ---------------------------------------------------------------------

def _number(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == 0:
            return "0"
        if abs(value) >= 1e6 or abs(value) < 1e-3:
            return f"{value:.3g}"
        return f"{value:.6g}"  # enough digits to see a variant move a value
    if isinstance(value, dict) and "min" in value:
        return f"[{_number(value['min'])} … {_number(value['max'])}]"
    return str(value)


def _code(text: str, limit: int = 72) -> str:
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[:limit - 1] + "…"
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def _values(claim: dict[str, Any], variant: str) -> str:
    if variant not in (claim.get("held") or {}):
        return "not reached"
    values = (claim.get("values") or {}).get(variant) or []
    text = ", ".join(_number(v) for v in values) or "–"
    count = (claim.get("count") or {}).get(variant) or 1
    if count > 1:
        text += f" (worst of {count})"
    if claim["held"][variant] is False:
        text = f"**failed**: {text}"
    return text


def _margin(claim: dict[str, Any], variants: list[str]) -> tuple[str, float | None]:
    """The smallest margin over the variants, with its variant and relative size."""
    margins, relatives = claim.get("margin") or {}, claim.get("relative_margin") or {}
    found = [v for v in variants if isinstance(margins.get(v), (int, float))]
    if not found:
        return "–", None
    # Relative to the bound where every variant has one (the bound may be computed).
    by_share = all(isinstance(relatives.get(v), (int, float)) for v in found)
    variant = min(found, key=lambda v: relatives[v] if by_share else margins[v])
    margin, relative = margins[variant], relatives.get(variant)
    share = f", {relative:.1%} of the bound" if isinstance(relative, (int, float)) else ""
    text = f"{_number(float(margin))} ({variant}{share})"
    return (f"**{text}**" if margin <= 0 else text), float(margin)


def _bound(claim: dict[str, Any], variants: list[str]) -> str:
    bounds = claim.get("bound") or {}
    for variant in variants:
        if bounds.get(variant) is not None:
            return _number(bounds[variant])
    return "–"


def chapter_table(name: str, entry: dict[str, Any], variants: list[str]) -> str:
    """One chapter: a table of its compared claims and a sentence on the others (MyST)."""
    claims = [c for c in entry.get("claims") or [] if isinstance(c, dict)]
    swept = [v for v in variants if v in (entry.get("wall_seconds") or {})]
    out = [f"### {{doc}}`{name} <../notebooks/{name}>`", ""]
    if not swept:
        return "\n".join(out + ["No variant of this chapter has been recorded yet.", ""])
    seconds = ", ".join(f"{v} {entry['wall_seconds'][v]:.0f} s" for v in swept)
    out += [f"Swept in: {', '.join(swept)} (execution time: {seconds}).", ""]
    failed = {v: s for v, s in (entry.get("status") or {}).items() if v in swept and s != "ok"}
    for variant, status in failed.items():
        out += [f"In **{variant}** the chapter stopped: {_code(status, 160)}.", ""]
    compared = [c for c in claims if any(m is not None for m in (c.get("margin") or {}).values())]
    truths = [c for c in claims if c not in compared]
    if compared:
        out += ["| claim (line) | " + " | ".join(swept) + " | bound | smallest margin |",
                "| --- | " + " | ".join("---" for _ in swept) + " | --- | --- |"]
        for claim in compared:
            margin, _ = _margin(claim, swept)
            cells = [f"{_code(claim.get('expression', ''))} ({claim.get('line')})"]
            cells += [_values(claim, v) for v in swept]
            cells += [_bound(claim, swept), margin]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    if truths:
        false = [c for c in truths if any(h is False for h in (c.get("held") or {}).values())]
        lines = ", ".join(str(c.get("line")) for c in truths)
        line = (f"{len(truths)} more claim{'s' if len(truths) != 1 else ''} without a margin "
                f"(equalities, `allclose` with a relative tolerance, `all(...)`, flags; "
                f"line{'s' if len(truths) != 1 else ''} {lines})")
        if not false:
            out += [line + ": true in every variant that reached them.", ""]
        else:
            out += [line + "; false in some variant:", ""]
            for claim in false:
                where = ", ".join(v for v, h in claim["held"].items() if h is False)
                out.append(f"- {_code(claim.get('expression', ''))} "
                           f"(line {claim.get('line')}): false in {where}")
            out.append("")
    unrecorded = testing_calls(NOTEBOOKS / f"{name}.md")
    if unrecorded:
        out += [f"{unrecorded} `np.testing` or `torch.testing` check{'s' if unrecorded != 1 else ''}"
                " (arrays compared within a tolerance) are not `assert` statements: they held "
                "wherever the chapter ran to its end, and carry no margin here.", ""]
    out += _slow_cells(entry, swept)
    return "\n".join(out)


def testing_calls(path: Path) -> int:
    """How many ``np.testing.assert_*`` / ``torch.testing.assert_close`` calls a chapter's
    code makes: checks the sweep cannot record (they are calls, not ``assert`` statements)."""
    if not path.exists():
        return 0
    import re

    calls = re.compile(r"\b(?:np|numpy|torch)\.testing\.assert_\w+\(")
    return len(calls.findall(path.read_text(encoding="utf-8")))


def _slow_cells(entry: dict[str, Any], swept: list[str]) -> list[str]:
    """A sentence on the chapter's cells past 30 s: the slowest variant's seconds, and
    whether each showed progress (a bar, or the line of a model loaded from its folder)."""
    slowest: dict[int, tuple[float, str, bool]] = {}
    for variant in swept:
        for cell in (entry.get("slow_cells") or {}).get(variant) or []:
            line, seconds = cell.get("line"), float(cell.get("seconds", 0))
            shown = bool(cell.get("progress")) and slowest.get(line, (0, "", True))[2]
            if line not in slowest or seconds > slowest[line][0]:
                slowest[line] = (seconds, variant, shown)
            else:
                slowest[line] = (*slowest[line][:2], shown)
    if not slowest:
        return []
    parts = [f"line {line} ({seconds:.0f} s, {variant}{'' if shown else ', **no progress**'})"
             for line, (seconds, variant, shown) in sorted(slowest.items())]
    return [f"Cells past 30 s, each showing progress as it runs unless said: "
            f"{'; '.join(parts)}.", ""]


def page_markdown(path: Path = CLAIMS, notebooks: Path = NOTEBOOKS) -> str:
    """The page's body: what was swept and when, then each chapter's table (MyST).

    Never raises: a missing or partial file gives a page that says what it lacks.
    """
    try:
        return _page_markdown(load(path), notebooks)
    except Exception as err:  # noqa: BLE001  (the book must build whatever the file holds)
        return f"`book/claims.json` could not be read ({type(err).__name__}: {err})."


def _page_markdown(data: dict[str, Any] | None, notebooks: Path) -> str:
    names = chapter_names(notebooks)
    if data is None:
        return ("No sweep has been recorded yet: `book/claims.json` does not exist. "
                "`make claims` writes it (it takes hours).")
    variants = list((data.get("variants") or {}).keys())
    chapters = data.get("chapters") or {}
    missing = [n for n in names if n not in chapters]
    stale = stale_chapters(data, notebooks)
    out = [f"Sweep recorded on {data.get('generated', 'an unknown date')}, on "
           f"{data.get('machine', 'an unrecorded machine')}; variants: "
           f"{', '.join(variants) or 'none'}.", ""]
    if missing:
        out += ["**Not swept yet**: " + ", ".join(f"{{doc}}`{n} <../notebooks/{n}>`"
                                                 for n in missing)
                + ". Their claims are checked in every book build, on this machine only.", ""]
    if stale:
        out += ["**Changed since their sweep** (the numbers below are from older code): "
                + ", ".join(sorted(stale)) + ".", ""]
    for name in names:
        if name in chapters and isinstance(chapters[name], dict):
            out.append(chapter_table(name, chapters[name], variants))
    return "\n".join(out)


def variant_summary(path: Path = CLAIMS) -> str:
    """A table of the recorded variants and the environment each set (MyST), or ''."""
    data = load(path)
    variants = (data or {}).get("variants") or {}
    if not isinstance(variants, dict) or not variants:
        return ""
    rows = ["| variant | environment |", "| --- | --- |"]
    for name, spec in variants.items():
        env = (spec or {}).get("env", {}) if isinstance(spec, dict) else {}
        text = " ".join(f"`{k}={v}`" for k, v in sorted(env.items())) or "as the book build"
        if isinstance(spec, dict) and spec.get("same_as"):
            text = f"the same run as {spec['same_as']} on this machine ({text}): not run twice"
        rows.append(f"| {name} | {text} |")
    return "\n".join(rows)


__all__ = ["CLAIMS", "RERUN", "chapter_names", "chapter_table", "code_digest", "load",
           "page_markdown", "stale_chapters", "variant_summary"]
