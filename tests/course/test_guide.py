"""The instructor's guide: its tables cover every chapter, and every chapter has a measured time."""

from __future__ import annotations

import json
from pathlib import Path

from attncourse.course import guide
from attncourse.course.exercises import chapter_exercises
from attncourse.course.timings import main as timings_main

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))


def test_every_chapter_has_a_time_measured_on_two_cores():
    data = json.loads(guide.TIMINGS.read_text(encoding="utf-8"))
    assert data["cpus"] == 2
    missing = [p.stem for p in CHAPTERS if p.stem not in data["seconds"]]
    assert not missing, f"no measured time for {missing}: run `make test`, then `make timings`"
    assert all(10 < s < 1800 for s in data["seconds"].values()), data["seconds"]


def test_tables_cover_every_chapter_and_add_up():
    found = guide.chapters()
    assert [ch.name for ch in found] == [p.stem for p in CHAPTERS]
    every = [ex for p in CHAPTERS for ex in chapter_exercises(p)]
    t = guide.totals(found)
    assert t["exercises"] == len(every) == t["coding"] + t["written"]
    assert t["auto_checked"] == t["coding"] == t["auto_points"]
    assert t["manual_points"] == t["written"]
    assert t["seconds"] == round(sum(guide.read_timings()[p.stem] for p in CHAPTERS))
    overview = guide.overview_table(found)
    assert overview.count("\n") == len(found) + 2
    assert f"| {t['exercises']} ({t['coding']} / {t['written']}) |" in overview
    sections = guide.chapter_sections(found)
    for ch in found:
        assert ch.goals and ch.prerequisites, f"{ch.name}: no learning goals or prerequisites found"
        assert f"<../notebooks/{ch.name}>" in overview and f"### {ch.title}" in sections
    for ex in every:
        assert f"| `{ex.label}` | {ex.kind} |" in sections


def test_links_copied_from_the_chapters_resolve_from_the_guide_page():
    # The guide (book/instructors.md) quotes goals and prerequisites, whose links are
    # relative to notebooks/; a link that does not resolve from book/ warns in the build.
    import re

    text = guide.chapter_sections(guide.chapters())
    targets = re.findall(r"\]\(([^)]+\.md)\)", text)
    assert targets, "no chapter links found: the test would check nothing"
    assert [t for t in targets if not (ROOT / "book" / t).is_file()] == []


def test_plans_hold_every_chapter_once():
    found = guide.chapters()
    for name, sessions in guide.PLANS.items():
        table = guide.plan_table(found, sessions)
        for ch in found:
            assert table.count(f"<../notebooks/{ch.name}>") == 1, (name, ch.name)
    table = guide.plan_table(found, [["04"]], complete=False)
    assert table.count("\n") == 2 and "04_self_attention" in table


def test_plan_titles_agree_with_the_rule_of_thumb():
    # The session lengths in a plan's title are those its table computes, by the page's rule.
    import re

    found = guide.chapters()
    for name, sessions in guide.PLANS.items():
        title, table = guide.plan_title(found, name, sessions), guide.plan_table(found, sessions)
        lengths = [float(h) for h in re.findall(r"\| ([0-9.]+) h \|", table)]
        count = int(re.search(r"\((\d+) sessions", title).group(1))
        assert count == len(lengths) == table.count("\n") - 1
        low, high = (float(x) for x in re.findall(r"([0-9.]+)(?: to | hours)", title)[:2]) \
            if " to " in title else (lengths[0], lengths[0])
        assert (low, high) == (min(lengths), max(lengths)), (title, lengths)
        # Chapter 8 (with the Triton kernel's section and exercises) is the longest session.
        assert max(lengths) <= 3.5, f"{name}: a session of {max(lengths)} hours"
    page = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
    assert "about 2 hours" not in page and "guide.plan_title(" in page


def test_an_unmeasured_chapter_reads_not_measured(tmp_path):
    (tmp_path / "09_new.md").write_text("# New\n\n```{exercise} A\n:label: ex-new-a\n\nSay why, in "
                                        "two sentences, with one example of your own making.\n```\n")
    found = guide.chapters(tmp_path, timings={})
    assert "not measured" in guide.overview_table(found)


def test_the_page_prints_the_generated_tables():
    page = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
    for call in ("guide.overview_table(found)", "guide.chapter_sections(found)", "guide.plan_table("):
        assert call in page
    assert "book/instructors" in (ROOT / "_toc.yml").read_text(encoding="utf-8")


def test_timings_command_refuses_a_folder_without_a_cache(tmp_path, capsys):
    assert timings_main([str(tmp_path), "--out", str(tmp_path / "t.json")]) == 2
    assert "jupyter-cache" in capsys.readouterr().err and not (tmp_path / "t.json").exists()


def test_timings_command_merges_a_caches_chapter_times(tmp_path):
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(str(tmp_path / "cache"))
    for uri, seconds in [("/c/notebooks/07_new.md", 42.4), ("/c/book/instructors.md", 3.0)]:
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(f"{seconds} + 1")]
        cache.cache_notebook_bundle(CacheBundleIn(nb, uri, data={"execution_seconds": seconds}),
                                    check_validity=False)
    out = tmp_path / "timings.json"
    out.write_text(json.dumps({"seconds": {"01_old": 90}}))
    assert timings_main([str(tmp_path / "cache"), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["seconds"] == {"01_old": 90, "07_new": 42}


def test_the_hand_off_table_gives_every_checks_rules():
    # The guide lists what each check allows and refuses, from the checks' rules.
    from attncourse.checks.hand_offs import HAND_OFFS

    found = guide.chapters()
    rows = guide.hand_off_table(found).split("\n")[2:]
    used = {ex.check for ch in found for ex in ch.exercises if ex.check}
    assert used <= set(HAND_OFFS) and {row.split(" | ")[2].strip("`") for row in rows} == used
    for name, rules in HAND_OFFS.items():
        if name not in used:
            continue
        row = next(r for r in rows if f"`{name}`" in r)
        assert rules.uses.replace("|", "/") in row
        assert all(f"{e.split(':', 1)[0]}.{e.split(':', 1)[1]}" in row for e in rules.library)
        assert ("Triton" in row) == bool(rules.must_call)
    assert "`softmax` (the course's own)" in next(r for r in rows if "`check_softmax`" in r)
    assert "hand_off_table" in (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
