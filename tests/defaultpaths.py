"""Keep the suite off the production paths: on a node that runs colo-agent, /var/lib/colo holds the ledger
that restores the pods and the agent's windows.

Every default path of agent/config.py is overridden for processes the tests start (environment), and an
audit hook sees every open, rename, removal or creation under those paths made in the test process: the
test that did it fails (in its teardown), and so does the run if it happened outside a test. A change on
disk that the hook did not see (another process on this machine) is reported as a warning.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any

from agent.config import POD_STATE_FILE
from agent.config_sections.enforcement import EnforcementConfig

# the directories that hold agent/config.py's default files
PROTECTED = tuple(sorted({os.path.dirname(POD_STATE_FILE), os.path.dirname(EnforcementConfig().ledger_file)}))
_EVENTS = {"open", "os.rename", "os.remove", "os.mkdir", "os.rmdir", "os.truncate", "os.chmod", "shutil.rmtree"}
touched: list[str] = []  # protected paths used by this process since the last `take()`
_spare: list[str] = []  # the directory the environment points the defaults to


def _protected(path: object) -> str | None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str | os.PathLike):
        return None
    full = os.path.abspath(os.fspath(path))
    return full if any(full == p or full.startswith(p + "/") for p in PROTECTED) else None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in _EVENTS:
        return
    for arg in args[:2] if event == "os.rename" else args[:1]:
        hit = _protected(arg)
        if hit is not None:
            touched.append(f"{event} {hit}")


def install() -> None:
    """Once per process: the audit hook, and the environment that points subprocesses' defaults away."""
    if _spare:
        return
    sys.addaudithook(_hook)
    spare = tempfile.mkdtemp(prefix="colo-test-defaults-")
    _spare.append(spare)
    os.environ.setdefault("COLO_STATE_FILE", os.path.join(spare, "windows.colowin"))
    os.environ.setdefault("COLO_ENFORCEMENT__LEDGER_FILE", os.path.join(spare, "enforcement-ledger.json"))
    os.environ["XDG_STATE_HOME"] = os.path.join(spare, "state")  # the standalone default: never the real ~


def uninstall() -> None:
    """Remove the spare directory (the hook stays: audit hooks cannot be removed)."""
    for spare in _spare:
        shutil.rmtree(spare, ignore_errors=True)


def take() -> list[str]:
    """The protected paths used since the last call."""
    got = list(dict.fromkeys(touched))
    touched.clear()
    return got


def disk_state() -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) of everything under the protected directories."""
    state: dict[str, tuple[int, int]] = {}
    for top in PROTECTED:
        for root, _, files in os.walk(top):
            for name in files:
                try:
                    st = os.stat(os.path.join(root, name))
                except OSError:
                    continue
                state[os.path.join(root, name)] = (st.st_mtime_ns, st.st_size)
    return state
