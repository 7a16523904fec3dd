"""A uvicorn server that leaves SIGTERM/SIGINT to the program that runs it.

uvicorn's own handlers re-raise the signal once the server has stopped, which ends the process before
the program's shutdown (releasing a Lease, saving state) ran. Programs install their own handlers and set
`should_exit` instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn


class Server(uvicorn.Server):
    """uvicorn.Server without signal handling of its own."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def stop(self) -> None:
        """Ask the server to exit (thread- and signal-safe: uvicorn polls the flag)."""
        self.should_exit = True
