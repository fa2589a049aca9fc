"""The tables of the instructor's guide (``book/instructors.md``), made from the chapters'
MyST sources and :data:`TIMINGS` (execution times of a book build on 2 CPU cores).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from attncourse.course.exercises import Exercise, chapter_exercises
from attncourse.course.nbgrader_source import CHECK_POINTS, WRITTEN_POINTS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
TIMINGS = ROOT / "book" / "chapter_timings.json"
#: Estimated minutes a learner needs: a coding exercise (write, run the check, fix) and a
#: written one; an exercise whose statement asks for more ("Then ...") takes ``EXTRA`` more.
MINUTES = {"coding": 15, "written": 10}
EXTRA = 10


@dataclass
class Chapter:
    """What the guide says about one chapter."""

    name: str
    title: str
    goals: str
    prerequisites: str
    exercises: list[Exercise]
    seconds: float | None


def minutes(ex: Exercise) -> int:
    """Estimated minutes for ``ex`` (:data:`MINUTES`, plus :data:`EXTRA` for a second task)."""
    return MINUTES[ex.kind] + (EXTRA if re.search(r"\bThen\b", ex.statement) else 0)


def points(ex: Exercise) -> int:
    """nbgrader points of ``ex``: auto-graded for a coding exercise, manual for a written one."""
    return CHECK_POINTS if ex.kind == "coding" else WRITTEN_POINTS


def read_timings(path: Path = TIMINGS) -> dict[str, float]:
    """``{chapter: seconds}`` from the timings file (empty if there is none)."""
    if not path.exists():
        return {}
    return {k: float(v) for k, v in json.loads(path.read_text(encoding="utf-8"))["seconds"].items()}


def _doc_links(text: str) -> str:
    """Make a chapter's links to other chapters (relative to notebooks/) work from book/.

    Chapters link to each other with Markdown links ``[text](04_self_attention.md)``,
    which JupyterLab follows too; older ``{doc}`` roles are rewritten the same way.
    """
    text = re.sub(r"(\{doc\}`[^`<]*<)([^`/>]+)>`", r"\1../notebooks/\2>`", text)
    return re.sub(r"\]\(([^)/:]+\.md)\)", r"](../notebooks/\1)", text)


def _goals(source: str) -> str:
    match = re.search(r"```\{admonition\} Learning goals\n(.*?)\n```", source, re.S)
    if not match:
        return ""
    lines = [line for line in match.group(1).split("\n") if not line.startswith(":")]
    return _doc_links("\n".join(lines).strip())


def _prerequisites(source: str) -> str:
    match = re.search(r"^\*\*Prerequisites\*\*:\s*(.*?)(?:\n\n|\Z)", source, re.S | re.M)
    return _doc_links(" ".join(match.group(1).split())) if match else ""


def chapters(notebooks: Path = NOTEBOOKS, timings: dict[str, float] | None = None) -> list[Chapter]:
    """Every chapter in ``notebooks`` (``*.md``, in file order) with what the guide needs."""
    timings = read_timings() if timings is None else timings
    found = []
    for path in sorted(notebooks.glob("*.md")):
        source = path.read_text(encoding="utf-8")
        title = re.search(r"^# (.+)$", source, re.M)
        found.append(Chapter(path.stem, title.group(1).strip() if title else path.stem, _goals(source),
                             _prerequisites(source), chapter_exercises(path), timings.get(path.stem)))
    return found


def _link(ch: Chapter) -> str:
    return f"{{doc}}`{ch.title} <../notebooks/{ch.name}>`"


def _time(seconds: float | None) -> str:
    return "not measured" if seconds is None else f"{seconds / 60:.1f} min"


def totals(found: list[Chapter]) -> dict[str, int]:
    """Counts over all chapters: exercises, coding, written, auto-checked, points, minutes."""
    every = [ex for ch in found for ex in ch.exercises]
    return {"exercises": len(every), "coding": sum(ex.kind == "coding" for ex in every),
            "written": sum(ex.kind == "written" for ex in every),
            "auto_checked": sum(ex.check is not None for ex in every),
            "auto_points": sum(points(ex) for ex in every if ex.kind == "coding"),
            "manual_points": sum(points(ex) for ex in every if ex.kind == "written"),
            "minutes": sum(minutes(ex) for ex in every),
            "seconds": round(sum(ch.seconds or 0 for ch in found))}


def overview_table(found: list[Chapter]) -> str:
    """One row per chapter: execution time, exercises and their points and minutes (MyST)."""
    rows = ["| chapter | executes in (2 CPU cores) | exercises (coding / written) | auto-checked "
            "| points (auto + manual) | exercise time (est.) |", "| --- | --- | --- | --- | --- | --- |"]
    for ch in found:
        t = totals([ch])
        rows.append(f"| {_link(ch)} | {_time(ch.seconds)} | {t['exercises']} ({t['coding']} / "
                    f"{t['written']}) | {t['auto_checked']} | {t['auto_points']} + {t['manual_points']} "
                    f"| {t['minutes']} min |")
    t = totals(found)
    rows.append(f"| **all {len(found)} chapters** | {_time(t['seconds'])} | {t['exercises']} "
                f"({t['coding']} / {t['written']}) | {t['auto_checked']} | {t['auto_points']} + "
                f"{t['manual_points']} | {t['minutes']} min |")
    return "\n".join(rows)


def exercise_table(ch: Chapter) -> str:
    """The exercises of one chapter: label, kind, check, points, minutes, what it practises."""
    rows = ["| exercise | kind | graded by | points | min. | practises |",
            "| --- | --- | --- | --- | --- | --- |"]
    for ex in ch.exercises:
        check = f"`{ex.check}`" if ex.check else "you"
        rows.append(f"| `{ex.label}` | {ex.kind} | {check} | {points(ex)} | {minutes(ex)} | {ex.title} |")
    return "\n".join(rows)


def chapter_sections(found: list[Chapter]) -> str:
    """For each chapter: its goals, prerequisites, time and exercise table (MyST)."""
    out = []
    for ch in found:
        out += [f"### {ch.title}", "", f"Chapter: {_link(ch)}. Executes in {_time(ch.seconds)} on 2 CPU "
                "cores (first run, models trained).", ""]
        if ch.prerequisites:
            out += [f"**Prerequisites**: {ch.prerequisites}", ""]
        if ch.goals:
            out += ["**Learning goals**:", "", ch.goals, ""]
        out += [exercise_table(ch), ""]
    return "\n".join(out)


#: Suggested splits of the course: sessions as lists of chapter-number prefixes. A
#: chapter that no session names is added as a session of its own at the end. Each plan's
#: title gets its session count and lengths from :func:`session_minutes`.
PLANS = {
    "A 2-week module": [["01"], ["02"], ["03"], ["03b"], ["04"], ["04b"], ["05"], ["06"], ["07"], ["08"], ["09"],
                        ["10"]],
    "A 1-day workshop": [["02"], ["04"], ["05"], ["06"]],
}
#: The rule of thumb: a session needs the notebooks' run time plus the exercises, and about
#: as long again for reading and discussion.
SESSION_FACTOR = 2


def _number(name: str) -> str:
    return name.split("_", 1)[0]


def session_minutes(group: list[Chapter]) -> float:
    """Minutes a session on ``group`` needs by the rule of thumb (:data:`SESSION_FACTOR`)."""
    t = totals(group)
    return SESSION_FACTOR * (t["minutes"] + t["seconds"] / 60)


def _groups(found: list[Chapter], sessions: list[list[str]], complete: bool) -> list[list[Chapter]]:
    by_number = {_number(ch.name): ch for ch in found}
    groups = [[by_number[n] for n in session if n in by_number] for session in sessions]
    if complete:
        named = {n for session in sessions for n in session}
        groups += [[ch] for ch in found if _number(ch.name) not in named]
    return [g for g in groups if g]


def _hours(minutes: float) -> str:
    return f"{minutes / 60:.1f}"


def plan_title(found: list[Chapter], name: str, sessions: list[list[str]], complete: bool = True) -> str:
    """``A 2-week module (10 sessions of 1.7 to 2.6 hours)``: counts and lengths computed."""
    lengths = [session_minutes(group) for group in _groups(found, sessions, complete)]
    span = (f"about {_hours(lengths[0])}" if _hours(min(lengths)) == _hours(max(lengths))
            else f"{_hours(min(lengths))} to {_hours(max(lengths))}")
    return f"{name} ({len(lengths)} sessions of {span} hours; {_hours(sum(lengths))} hours in all)"


def plan_table(found: list[Chapter], sessions: list[list[str]], complete: bool = True) -> str:
    """Sessions of a plan: chapters, exercises' minutes, execution time and session length (MyST).

    With ``complete``, chapters that no session names get sessions of their own.
    """
    rows = ["| session | chapters | exercises (est.) | notebooks execute in | session (est.) |",
            "| --- | --- | --- | --- | --- |"]
    for i, group in enumerate(_groups(found, sessions, complete)):
        t = totals(group)
        rows.append(f"| {i + 1} | {', '.join(_link(ch) for ch in group)} | {t['minutes']} min "
                    f"| {_time(t['seconds'])} | {_hours(session_minutes(group))} h |")
    return "\n".join(rows)


def _references(check: str) -> list[str]:
    """The package functions ``check`` names as its exercise's reference (``module.name``)."""
    import ast
    import inspect

    import attncourse.chapters as chapters

    fn = chapters.check(check)
    names = []
    for node in ast.walk(ast.parse(inspect.getsource(fn))):
        if isinstance(node, ast.keyword) and node.arg == "references":
            names += [n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)]
    found = [fn.__globals__[n] for n in names if n in fn.__globals__]
    return [f"{getattr(f, '__module__', '')}.{getattr(f, '__qualname__', f)}" for f in found]


def hand_off_table(found: list[Chapter]) -> str:
    """What each check lets the learner use and what it refuses (MyST), from its rules.

    The rules are each check's ``@allowing`` (:data:`attncourse.checks.guard.HAND_OFFS`): a
    call to a refused function, direct or through others, makes the check answer "not accepted".
    """
    import attncourse.chapters as chapters
    from attncourse.checks.guard import HAND_OFFS

    rows = ["| chapter | learner writes | check | may use | refuses |", "| --- | --- | --- | --- | --- |"]
    for ch in found:
        for ex in ch.exercises:
            if not ex.check:
                continue
            chapters.check(ex.check)  # imports the check's module, which registers its rules
            rules = HAND_OFFS.get(ex.check)
            if rules is None:
                continue
            refused = [f"`{name.split('.')[-1]}` (the course's own)" for name in _references(ex.check)]
            refused += [f"`{origin}.{name}`" for origin, name in (e.split(":", 1) for e in rules.library)]
            if rules.package:
                kept = ", ".join(f"`{a.split('.')[-1]}`" for a in rules.allow)
                refused.append("any other function of `attncourse`" + (f" (but {kept})" if kept else ""))
            if rules.namespace:
                refused.append("functions from the notebook's other cells (but earlier answers)")
            if rules.must_call:
                refused.append("an answer that launches no Triton kernel")
            rows.append(f"| {_number(ch.name)} | `{ex.function}` | `{ex.check}` | "
                        f"{rules.uses.replace('|', '/')} | {'; '.join(refused)} |")
    return "\n".join(rows)
