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
    return {str(p.relative_to(ROOT / "agent")) for p in (ROOT / "agent").rglob("*.py") if p.name != "__init__.py"}


def named(section: str) -> set[str]:
    return set(re.findall(r"`([\w/]+\.py)`", section))


def test_every_agent_module_is_on_the_map() -> None:
    assert sorted(agent_modules() - named(agent_section())) == []


def test_the_map_names_no_module_that_is_gone() -> None:
    assert sorted(named(agent_section()) - agent_modules()) == []


def test_the_check_finds_a_missing_module() -> None:
    section = agent_section().replace("`sense/rates.py`", "the rates module")
    assert "sense/rates.py" in agent_modules() - named(section)


def unit_drawing() -> str:
    """The agent's units by layer, top down, with the units each imports (the drawing in docs/design.md)."""
    from tests.test_layout import AGENT_UNITS, agent_unit, module_graph

    imports: dict[str, set[str]] = {u: set() for u in AGENT_UNITS}
    for module, targets in module_graph(ROOT, "agent").items():
        mine = agent_unit(module)
        for target in targets:
            theirs = agent_unit(target)
            if mine and theirs and mine != theirs:
                imports[mine].add(theirs)
    rows = sorted(AGENT_UNITS, key=lambda u: (-AGENT_UNITS[u], u))
    width = max(len(u.removeprefix("agent.")) for u in rows) + 1
    return "\n".join(
        f"layer {AGENT_UNITS[u]:2}  {u.removeprefix('agent.'):{width}} ──▶ "
        + (", ".join(sorted(t.removeprefix("agent.") for t in imports[u])) or "nothing of agent/")
        for u in rows
    )


def test_the_unit_drawing_is_the_code() -> None:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    drawn = text.split("<!-- agent-units -->\n```\n", 1)[1].split("```\n<!-- /agent-units -->", 1)[0]
    assert drawn.rstrip("\n") == unit_drawing(), "docs/design.md's agent units are stale: paste unit_drawing()"
