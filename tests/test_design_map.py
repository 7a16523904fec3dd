"""docs/design.md's code map of agent/ names every module by its path under agent/, and nothing that is gone: a
module added, moved or removed without the map fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def agent_section() -> str:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    start = text.index("**agent/**")
    return text[start : text.index("**exporter/**", start)]


def agent_modules() -> set[str]:
    return {
        str(p.relative_to(ROOT / "agent")) for p in (ROOT / "agent").rglob("*.py") if p.name != "__init__.py"
    }


def named(section: str) -> set[str]:
    return set(re.findall(r"`([\w/]+\.py)`", section))


def test_every_agent_module_is_on_the_map() -> None:
    assert sorted(agent_modules() - named(agent_section())) == []


def test_the_map_names_no_module_that_is_gone() -> None:
    assert sorted(named(agent_section()) - agent_modules()) == []


def test_the_check_finds_a_missing_module() -> None:
    section = agent_section().replace("`sense/rates.py`", "the rates module")
    assert "sense/rates.py" in agent_modules() - named(section)
