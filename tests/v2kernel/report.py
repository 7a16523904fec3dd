"""pytest plugin loaded inside the UML guest: every test phase's outcome as one JSON line on hostfs.

The host reads the file back (tests/v2kernel/guest.py) and reports each guest test as an ordinary item.
"""

from __future__ import annotations

import json
import os

import pytest

RESULTS_ENV = "COLO_UML_RESULTS"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    skip_reason = ""
    if report.skipped and isinstance(report.longrepr, tuple):
        skip_reason = str(report.longrepr[2]).removeprefix("Skipped: ")
    line = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "duration": report.duration,
        "text": "" if report.passed or report.skipped else report.longreprtext,
        "skip": skip_reason,
    }
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
