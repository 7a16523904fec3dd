"""uvicorn without its package `__init__`, for a program that only serves.

`uvicorn/__init__.py` imports `uvicorn.main` for its `main` and `run`: the command line (click) and the
reload and multi-process supervisors, about 1.1 MiB of a node agent's resident memory that serving never
touches. `install()` registers the package lean (`common.lazy_import`): `uvicorn.Config` and
`uvicorn.Server` come from `uvicorn.config` and `uvicorn.server`, the submodules import as usual, and any
other name runs the real `__init__`. Call it before anything imports uvicorn (the agent's main does).
"""

from __future__ import annotations

import sys

from common.lazy_import import installed_directory, lean_package

EXPORTS = {"Config": "config", "Server": "server"}


def install() -> None:
    """Register the lean package, unless uvicorn was already imported the usual way."""
    if "uvicorn" not in sys.modules:
        lean_package("uvicorn", installed_directory("uvicorn"), EXPORTS)
