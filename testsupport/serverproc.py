"""A server in a subprocess, with its resident memory (current and peak) read from /proc."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ServerProcess:
    proc: subprocess.Popen[str]
    port: int

    def memory_kib(self, field: str = "VmRSS") -> int:
        """VmRSS (now) or VmHWM (peak) of the server process, in KiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise AssertionError(f"{field} not in /proc/{self.proc.pid}/status")

    def reset_peak(self) -> None:
        """Start VmHWM over from the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")


@contextlib.contextmanager
def extender_process(serving: dict[str, Any], max_body_bytes: int) -> Iterator[ServerProcess]:
    """testsupport/extender_server.py running in its own process; its stderr is checked for tracebacks."""
    cmd = [sys.executable, "-m", "testsupport.extender_server", json.dumps(serving), str(max_body_bytes)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.strip().isdigit():
            proc.kill()
            raise AssertionError(f"server did not start: {line!r} {proc.communicate()[1]}")
        yield ServerProcess(proc, int(line))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def stderr_of(server: ServerProcess) -> str:
    """The server's stderr once it has stopped."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
    _, err = server.proc.communicate(timeout=10)
    return err
