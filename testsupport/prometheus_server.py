"""A real Prometheus (Debian's `prometheus` package) on loopback, its storage filled with known series.

The series are OpenMetrics text; `promtool tsdb create-blocks-from openmetrics` turns them into TSDB blocks
before the server starts, so they must lie in the past (the blocks come before the server's head). Retention
is a century: the server never deletes them while it runs.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

#: promtool cuts blocks of at most this length; the default 2 h makes it read the input once per block.
_BLOCK_SPAN = "192h"


def binaries() -> tuple[str, str] | None:
    """Paths of `prometheus` and `promtool`, or None when either is missing."""
    server, tool = shutil.which("prometheus"), shutil.which("promtool")
    return (server, tool) if server is not None and tool is not None else None


def free_port() -> int:
    """A loopback port nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def prometheus_server(root: Path, openmetrics: Iterable[str], *, timeout: float = 30.0) -> Iterator[str]:
    """The URL of a Prometheus serving `openmetrics` (each an OpenMetrics text ending in `# EOF`), with its
    files under `root`; the server is stopped on exit. RuntimeError if it cannot be started."""
    found = binaries()
    if found is None:
        raise RuntimeError("needs the prometheus and promtool binaries (Debian: apt-get install prometheus)")
    server, tool = found
    data = root / "data"
    for i, text in enumerate(openmetrics):
        source = root / f"series-{i}.om"
        source.write_text(text, encoding="utf-8")
        subprocess.run(
            [tool, "tsdb", "create-blocks-from", "openmetrics", f"--max-block-duration={_BLOCK_SPAN}", "--quiet",
             str(source), str(data)],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        source.unlink()
    config = root / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n", encoding="utf-8")
    log = root / "prometheus.log"
    for _attempt in range(3):  # the free port may be taken between the probe and the bind
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [server, f"--config.file={config}", f"--storage.tsdb.path={data}",
                 "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}"],
                cwd=root, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline and not _ready(url):
                time.sleep(0.05)
            if proc.poll() is None and _ready(url):
                yield url
                return
        finally:
            _stop(proc)
    raise RuntimeError(f"prometheus did not become ready: {log.read_text(errors='replace')[-2000:]}")
