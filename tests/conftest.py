"""Shared fixtures: real cgroup v1 trees on this machine, kernel-format cgroup v2 trees, the fake API server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import defaultpaths
from tests.v2kernel import guest
from testsupport.cgtree import V1Tree, v1_available

pytest_plugins = ["testsupport.kubeapi.fixtures"]  # kube_api (the fake API server) and kube (a connected client)


_disk_before: dict[str, tuple[int, int]] = {}


def pytest_configure(config: pytest.Config) -> None:
    defaultpaths.install()
    _disk_before.update(defaultpaths.disk_state())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if anything outside a test used a production path; warn of changes made by others."""
    hits = defaultpaths.take()
    changed = sorted(p for p, v in defaultpaths.disk_state().items() if _disk_before.get(p) != v)
    defaultpaths.uninstall()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if hits:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if reporter is not None:
            reporter.write_line(f"ERROR: the run used production paths: {', '.join(hits)}", red=True)
    if changed and reporter is not None:
        reporter.write_line(f"warning: changed during the run by another process: {', '.join(changed)}", yellow=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    line = guest.summary()
    if line is not None:
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _stay_off_production_paths() -> Iterator[None]:
    """A test that opens, writes or removes anything under /var/lib/colo fails (agent/config.py's defaults)."""
    defaultpaths.take()
    yield
    hits = defaultpaths.take()
    if hits:
        pytest.fail(f"the test used production paths: {', '.join(hits)}", pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not guest.in_guest():
        guest.mirror_guest_items(items)  # the v2 tier runs inside the UML kernel; its results come back here
    if v1_available():
        return
    skip = pytest.mark.skip(reason="needs root and a mounted cgroup v1 hierarchy")
    for item in items:
        if "cgroupv1" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["cgroupfs", "systemd"])
def v1tree(request: pytest.FixtureRequest) -> Iterator[V1Tree]:
    """A kubepods-like tree on the real v1 hierarchy, once per driver naming scheme."""
    tree = V1Tree(request.param)
    try:
        yield tree
    finally:
        tree.cleanup()


@pytest.fixture
def v1tree_cgroupfs() -> Iterator[V1Tree]:
    tree = V1Tree("cgroupfs")
    try:
        yield tree
    finally:
        tree.cleanup()
