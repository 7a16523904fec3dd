"""The shape of the tree. The shipped packages import each other only downwards through fixed layers (so there
is no cycle between packages, and the controller never loads the agent or its exporter). The test and
benchmark code share helpers through `testsupport/` only: `tests/` and `bench/` never import each other, and
`testsupport/` imports neither (so a benchmark never loads the test suite, nor a test a benchmark). Nor is
`testsupport/` shipped: it is not in the wheel's packages nor in the image's context."""

from __future__ import annotations

import ast
import shutil
import tomllib
from collections.abc import Mapping, Set
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {"tests": {"bench"}, "bench": {"tests"}, "testsupport": {"tests", "bench"}}

# The shipped packages by layer: a package imports only packages of a lower layer (README, "Import graph").
LAYERS = {
    "common": 0, "contract": 0, "cgroup": 0,
    "kube": 1,
    "serving": 2,
    "agent": 3, "controller": 3,
    "exporter": 4,
    "colo_agent": 5, "colo_sim": 5,
}  # fmt: skip


def imported_packages(source: str) -> set[str]:
    """Top-level package of every absolute import in `source` (module level or inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def package_graph(root: Path, packages: Set[str]) -> dict[str, set[str]]:
    """package -> the other packages of `packages` its files import (module level or inside functions)."""
    return {
        package: {
            name
            for path in (root / package).rglob("*.py")
            for name in imported_packages(path.read_text(encoding="utf-8")) & packages
            if name != package
        }
        for package in sorted(packages)
    }


def cycles(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one package (Tarjan), each sorted: [] when acyclic."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward_imports(graph: Mapping[str, Set[str]]) -> list[str]:
    """'a -> b' for each import of a package of the same or a higher layer."""
    return [f"{a} -> {b}" for a, targets in sorted(graph.items()) for b in sorted(targets) if LAYERS[b] >= LAYERS[a]]


# The agent by stage (docs/design.md): each of its top-level modules and stage packages has a layer, and imports
# only units of lower layers — sense below remember's readers, decide and act above both, the pipeline that runs
# them and the composition root on top. Every module of agent/ belongs to one unit.
AGENT_UNITS = {
    "agent.snapshot": 0, "agent.config_sections": 0,
    "agent.node_state": 1,
    "agent.windows": 2,
    "agent.sense": 3,
    "agent.config": 4, "agent.view": 4,
    "agent.runtime": 5,
    "agent.cluster": 6,
    "agent.capacity": 7, "agent.enforce": 7,
    "agent.evict": 8,
    "agent.pipeline": 9,
    "agent.main": 10,
}  # fmt: skip
#: The most modules agent/ keeps at its top (the composition root and the types every stage shares).
AGENT_TOP_MODULES = 8


def agent_unit(module: str) -> str | None:
    """The unit (top-level module or stage package) an agent module belongs to."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 and ".".join(parts[:2]) in AGENT_UNITS else None


def unit_violations(graph: Mapping[str, Set[str]]) -> list[str]:
    """'a -> b' for each import of a unit of the same or a higher layer by a module of another unit."""
    found = set()
    for module, targets in graph.items():
        mine = agent_unit(module)
        for target in targets:
            theirs = agent_unit(target)
            if mine and theirs and mine != theirs and AGENT_UNITS[theirs] >= AGENT_UNITS[mine]:
                found.add(f"{mine} -> {theirs}")
    return sorted(found)


def test_every_agent_module_is_in_a_unit() -> None:
    graph = module_graph(ROOT, "agent")
    assert sorted(m for m in graph if m != "agent" and agent_unit(m) is None) == []


def test_agent_units_import_only_lower_layers() -> None:
    assert unit_violations(module_graph(ROOT, "agent")) == []


def test_the_unit_check_finds_an_upward_import(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "agent", tmp_path / "agent")
    sampler = tmp_path / "agent" / "sense" / "sampler.py"
    sampler.write_text(sampler.read_text(encoding="utf-8") + "\nfrom agent.capacity import lendable\n")
    assert unit_violations(module_graph(tmp_path, "agent")) == ["agent.sense -> agent.capacity"]


def test_agent_keeps_few_modules_at_its_top() -> None:
    top = [p.name for p in (ROOT / "agent").glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= AGENT_TOP_MODULES, sorted(top)


#: No shipped module grows past this many lines: past it, it holds more than one thing.
MAX_MODULE_LINES = 500


def test_no_shipped_module_is_over_the_line_limit() -> None:
    too_long = [
        f"{path.relative_to(ROOT)}: {n}"
        for package in LAYERS
        for path in sorted((ROOT / package).rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert too_long == []


# Inside the agent, enforcement by layer (README, "collect → store → decide → act"): the cgroup parts and the
# vocabulary of actions at the bottom, act (the executor, restore, the originals) above them, decide (the
# strategies) above act, the enforcement stage on top. A module never reaches one of a higher layer, not
# even through a module of no layer (a strategy may use the executor's types; the executor never a strategy).
AGENT_LAYERS = {
    "agent.enforce.parts": 0, "agent.enforce.ledger": 0, "agent.enforce.actions": 0,
    "agent.enforce.quota_changes": 1, "agent.enforce.originals": 1, "agent.enforce.restore": 1, "agent.enforce.executor": 1,
    "agent.enforce.strategies": 2,
    "agent.enforce.stage": 3,
}  # fmt: skip


def agent_layer(module: str) -> int | None:
    """The layer of an agent module (the longest AGENT_LAYERS prefix that names it or its package)."""
    found = [(len(p), n) for p, n in AGENT_LAYERS.items() if module == p or module.startswith(p + ".")]
    return max(found)[1] if found else None


def layer_violations(graph: Mapping[str, Set[str]]) -> list[str]:
    """'a -> b' for each module of a layer that reaches (through any chain of imports) one of a higher layer."""
    found: list[str] = []
    for start in sorted(graph):
        mine = agent_layer(start)
        if mine is None:
            continue
        seen, todo = {start}, list(graph[start])
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            theirs = agent_layer(node)
            if theirs is not None and theirs > mine:
                found.append(f"{start} -> {node}")
            todo.extend(graph.get(node, ()))
    return sorted(found)


def module_graph(root: Path, package: str) -> dict[str, set[str]]:
    """module -> the other modules of `package` it imports (absolute imports, `from pkg import module` and
    those under TYPE_CHECKING included: a cycle there is still two modules that need each other)."""
    modules = {
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
        for path in (root / package).rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[name] = (found & set(modules)) - {name, package}
    return graph


def test_every_shipped_package_has_a_layer() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {pattern.rstrip("*") for pattern in include} == set(LAYERS)


def test_no_cycle_between_packages() -> None:
    assert cycles(package_graph(ROOT, set(LAYERS))) == []


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_no_cycle_between_modules_of_a_package(package: str) -> None:
    assert cycles(module_graph(ROOT, package)) == []


def test_the_module_cycle_check_finds_type_checking_cycles(tmp_path: Path) -> None:
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "__init__.py").write_text("")
    (tmp_path / "agent" / "stage.py").write_text("from agent import report\n")
    (tmp_path / "agent" / "report.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agent.stage import Enforcer\n"
    )
    assert cycles(module_graph(tmp_path, "agent")) == [["agent.report", "agent.stage"]]


def test_agent_modules_reach_only_lower_layers() -> None:
    assert layer_violations(module_graph(ROOT, "agent")) == []


def test_the_layer_check_fails_when_act_imports_decide(tmp_path: Path) -> None:
    """A copy of agent/ with one planted import of a strategy in the executor, directly and through a
    module of no layer: both are found."""
    shutil.copytree(ROOT / "agent", tmp_path / "agent")
    assert layer_violations(module_graph(tmp_path, "agent")) == []
    executor = tmp_path / "agent" / "enforce" / "executor.py"
    executor.write_text(
        executor.read_text(encoding="utf-8") + "\nfrom agent.enforce.strategies import cpu_suppression\n"
    )
    assert "agent.enforce.executor -> agent.enforce.strategies.cpu_suppression" in layer_violations(
        module_graph(tmp_path, "agent")
    )
    executor.write_text(
        executor.read_text(encoding="utf-8").replace("from agent.enforce.strategies import cpu_suppression", "")
    )
    (tmp_path / "agent" / "helper.py").write_text("from agent.enforce.strategies import registry\n")
    (tmp_path / "agent" / "enforce" / "parts" / "extra.py").write_text("from agent import helper\n")
    assert "agent.enforce.parts.extra -> agent.enforce.strategies.registry" in layer_violations(
        module_graph(tmp_path, "agent")
    )


def test_packages_import_only_lower_layers() -> None:
    assert upward_imports(package_graph(ROOT, set(LAYERS))) == []


def test_the_controller_imports_neither_the_agent_nor_its_exporter() -> None:
    assert package_graph(ROOT, set(LAYERS))["controller"].isdisjoint({"agent", "exporter", "colo_agent"})


def test_the_cycle_check_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"agent": {"exporter"}, "exporter": {"agent"}, "kube": set()}) == [["agent", "exporter"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert upward_imports({"agent": {"exporter", "kube"}, "exporter": {"agent"}}) == ["agent -> exporter"]


def test_the_old_agent_exporter_cycle_would_be_found(tmp_path: Path) -> None:
    (tmp_path / "agent").mkdir()
    (tmp_path / "exporter").mkdir()
    (tmp_path / "agent" / "runtime.py").write_text("def serve():\n    from exporter.app import create_app\n")
    (tmp_path / "exporter" / "api.py").write_text("from agent.view import AgentView\n")
    assert cycles(package_graph(tmp_path, {"agent", "exporter"})) == [["agent", "exporter"]]


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
