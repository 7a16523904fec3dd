"""Fixtures of the cgroup v2 tier; they only ever run inside the UML guest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.v2kernel.v2real import V2Tree


@pytest.fixture(params=["cgroupfs", "systemd"])
def v2tree(request: pytest.FixtureRequest) -> Iterator[V2Tree]:
    """A kubelet-shaped tree on the guest's real v2 hierarchy, once per driver naming scheme."""
    tree = V2Tree(request.param)
    try:
        yield tree
    finally:
        tree.cleanup()


@pytest.fixture
def v2tree_systemd() -> Iterator[V2Tree]:
    tree = V2Tree("systemd")
    try:
        yield tree
    finally:
        tree.cleanup()
