"""The suite's guard on production paths sees what a test does there, and points subprocesses elsewhere."""

from __future__ import annotations

import os

import pytest

from tests import defaultpaths


def test_the_guard_sees_an_open_under_var_lib_colo() -> None:
    assert "/var/lib/colo" in defaultpaths.PROTECTED
    missing = "/var/lib/colo/no-such-file-" + os.urandom(4).hex()
    with pytest.raises(OSError):  # absent; the audit hook sees the attempt either way
        os.close(os.open(missing, os.O_RDONLY))
    assert defaultpaths.take() == [f"open {missing}"]
    os.close(os.open(os.devnull, os.O_RDONLY))
    assert defaultpaths.take() == []


def test_subprocesses_get_default_files_elsewhere() -> None:
    for key in ("COLO_STATE_FILE", "COLO_ENFORCEMENT__LEDGER_FILE"):
        assert not os.environ[key].startswith("/var/lib/colo/")
