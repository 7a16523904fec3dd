"""The distribution's name: `colo` on the package index is an unrelated project, so Colo is `colo-k8s`; the
version lookup, the install instructions and colo-sim's hint all name it (or the checkout), never `colo[...]`."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from colo_sim.plot import install_hint
from common import buildinfo

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_version_is_looked_up_under_the_name_pyproject_gives() -> None:
    assert PROJECT["name"] == buildinfo.DISTRIBUTION
    assert PROJECT["name"] != "colo", "`colo` on the package index is a terminal-colour script"
    assert set(PROJECT["scripts"]) == {"colo-agent", "colo-controller", "colo-sim"}


def test_the_installed_distribution_reports_pyprojects_version() -> None:
    """Under the new name, or (a venv installed before the rename) the distribution that ships these modules."""
    shipping = metadata.packages_distributions().get("colo_agent", [])
    assert shipping, "the suite runs from an installed venv"
    assert buildinfo.version() == PROJECT["version"]


def test_no_instruction_installs_the_unrelated_colo() -> None:
    texts = [ROOT / "README.md", ROOT / "Makefile", *(ROOT / "docs").rglob("*.md"), *(ROOT / "colo_sim").rglob("*.py")]
    wrong = re.compile(r"""pip install\s+['"]?colo(\[|['"\s]|$)|\bcolo\[sim\]""")
    found = [f"{p.relative_to(ROOT)}: {m[0]}" for p in texts for m in wrong.finditer(p.read_text(encoding="utf-8"))]
    assert found == []


def test_colo_sims_hint_installs_the_checkouts_sim_extra_into_its_own_python() -> None:
    hint = install_hint()
    assert hint.startswith(f"{sys.executable} -m pip install -e ")
    assert hint.endswith(f"{ROOT}[sim]'") or hint.endswith(f"{ROOT}[sim]")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(req.startswith("matplotlib") for req in extra["sim"])
