"""The instructor's guide lists every private reference a check carries."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NUMBERS = {"five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def test_guide_names_every_private_reference_of_the_checks():
    private = set()
    for path in [*(ROOT / "attncourse" / "checks").glob("*.py"),
                 *(ROOT / "attncourse" / "chapters").glob("ch*/*checks.py")]:
        # A private reference computes the expected answer itself instead of calling the
        # package: named ``_..._reference`` or, for the torch-based GRU cell, ``_torch_...``.
        text = path.read_text()
        private |= set(re.findall(r"^def (_\w*_reference|_torch_\w+)\(", text, re.MULTILINE))
    guide = " ".join((ROOT / "book" / "instructors.md").read_text().split())
    match = re.search(r"(\w+) checks carry a private reference", guide, re.IGNORECASE)
    assert match, "the guide's sentence on private references is missing"
    assert NUMBERS[match.group(1).lower()] == len(private), (match.group(1), sorted(private))
    for name in private:
        assert f"`{name}`" in guide, name
