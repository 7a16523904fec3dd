"""Every documentation page ends with what to check (the README promises it): a reader who followed a page
finds at its end how to see that it worked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))


def test_the_readme_promises_it() -> None:
    assert "Each page ends with what to check." in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_the_last_section_is_what_to_check(page: Path) -> None:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    sections = re.findall(r"^## (.+?)\s*$", text, re.M)
    assert sections and sections[-1] == "What to check", f"last section: {sections[-1:]}"
    assert text.rstrip().rsplit("## What to check", 1)[1].strip(), "an empty section"
