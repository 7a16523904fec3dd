"""The test and benchmark code share helpers through `testsupport/` only: `tests/` and `bench/` never import
each other, and `testsupport/` imports neither (so a benchmark never loads the test suite, nor a test a
benchmark). Nor is `testsupport/` shipped: it is not in the wheel's packages nor in the image's context."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {"tests": {"bench"}, "bench": {"tests"}, "testsupport": {"tests", "bench"}}


def imported_packages(source: str) -> set[str]:
    """Top-level package of every absolute import in `source` (module level or inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def crossings(package: str) -> list[str]:
    """'file: package' for each import of `package`'s files that FORBIDDEN rules out."""
    return [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in sorted(imported_packages(path.read_text(encoding="utf-8")) & FORBIDDEN[package])
    ]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_between_tests_and_bench(package: str) -> None:
    assert crossings(package) == []


def test_the_scan_sees_every_form_of_import() -> None:
    source = "import bench.x\nfrom tests.y import z\ndef f():\n    from bench import w\nfrom . import sibling\n"
    assert imported_packages(source) == {"bench", "tests"}


def test_testsupport_is_not_shipped() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not any(pattern.startswith(("testsupport", "tests", "bench")) for pattern in include)
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    assert ignore[ignore.index("*") :][0] == "*", "the image's context is deny-by-default"
    assert not any(line.startswith("!testsupport") for line in ignore)
    assert "testsupport" in pyproject["tool"]["mypy"]["packages"], "the shared helpers are type-checked strictly"
