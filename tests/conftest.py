"""Shared fixtures: real cgroup v1 trees on this machine, kernel-format cgroup v2 trees, the fake API server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cgtree import V1Tree, v1_available
from tests.v2kernel.guest import in_guest, mirror_guest_items

pytest_plugins = ["tests.kubeapi.fixtures"]  # kube_api (the fake API server) and kube (a connected client)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not in_guest():
        mirror_guest_items(items)  # the v2 tier runs inside the UML kernel; its results come back here
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
