"""pytest fixtures for the fake API server; import them into a conftest or test module.

from testsupport.kubeapi.fixtures import kube, kube_api  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kube import Kube
from testsupport.kubeapi.server import FakeKubeAPI


@pytest.fixture
def kube_api() -> Iterator[FakeKubeAPI]:
    """A started fake API server, stopped (with its watches cut) after the test."""
    server = FakeKubeAPI().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube(kube_api: FakeKubeAPI, tmp_path: Path) -> Iterator[Kube]:
    """A Kube connected the production way: through a kubeconfig file pointing at ``kube_api``.

    The request timeout is short so tests exercising outages fail fast instead of hanging.
    """
    client = Kube.connect(kube_api.kubeconfig(tmp_path / "kubeconfig"), request_timeout=3.0)
    assert client is not None
    try:
        yield client
    finally:
        client.close()
