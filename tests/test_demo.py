"""The standalone controller's table and `make demo` as a person meets them: at most 100 columns (wider only
with --wide), a legend saying when each window moves, the capacity the agents compute, counted words, a
non-zero exit when no agent answered, and a taken address named before anything starts."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.load_annotations import format_time
from controller.policy import default_policy
from controller.standalone import NodeReport, cycle_document
from controller.standalone_view import Legend, duration, plural, table

ROOT = Path(__file__).resolve().parents[1]
CONTROLLER = [sys.executable, "-m", "controller.main"]
NOW = 1_800_000_000.0
METRICS = tuple(s.name for s in default_policy().spec.sync_policy)
LEGEND = Legend.of(default_policy().spec, 5.0)


def report(**over: object) -> NodeReport:
    base: dict[str, object] = {
        "url": "http://127.0.0.2:9817/api/v1/node",
        "annotations": {"cpu_usage_avg_5m": f"0.81234,{format_time(NOW - 60)}"},
        "score": 9,
        "overloaded": "Load[cpu_usage_avg_5m] of node[demo-node-1] is too high",
        "hot_value": 0,
        "would_patch": (),
        "error": None,
        "capacity_off": "standalone: no cluster, nothing published or enforced",
    }
    return NodeReport(**{**base, **over})  # type: ignore[arg-type]


def test_plural_and_durations() -> None:
    assert [plural(n, "agent") for n in (0, 1, 3)] == ["0 agents", "1 agent", "3 agents"]
    assert [duration(s) for s in (42, 161, 900, 10800, 10740)] == ["42s", "2m41s", "15m", "3h", "2h59m"]


def test_the_table_fits_100_columns_and_says_why_values_hold_still() -> None:
    reports = {
        "demo-node-1": report(),
        "demo-node-2": report(error="bad_payload: wrong_node: agent reports node 'someone-else' " * 3),
        "demo-node-3": report(capacity=(1500, 3 * 2**30), capacity_off="", overloaded=None),
    }
    text = table(reports, METRICS, NOW, LEGEND, cycle=4)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 100
    assert lines[0].startswith("colo-controller standalone: 3 agents polled every 5s, cycle 4")
    row = {line.split()[0]: line for line in lines if line.startswith("demo-node")}
    assert "81.2%" in row["demo-node-1"] and "filtered: cpu 5m" in row["demo-node-1"]
    assert "1500m, 3.0Gi" in row["demo-node-3"] and row["demo-node-3"].endswith("ok")
    assert row["demo-node-2"].endswith("…")
    legend = " ".join(lines)
    assert "5m every 3m, max1h every 15m, max1d every 3h" in legend
    assert "Next writes: 5m in 2m" in legend, "the 5-minute window was written a minute ago"
    assert "off: standalone: no cluster" in legend
    assert "colo.io/oversubscription" not in text


def test_wide_shows_everything() -> None:
    long_error = "bad_payload: wrong_node: agent reports node 'someone-else' " * 3
    text = table({"n": report(error=long_error)}, METRICS, NOW, LEGEND, wide=True)
    assert long_error in text and "…" not in text


def test_the_json_document_carries_the_agents_capacity() -> None:
    doc = cycle_document({"a": report(capacity=(1500, 2**30), capacity_off=""), "b": report()}, NOW)
    assert doc["nodes"]["a"]["oversubscription"] == {"cpu_millicores": 1500, "memory_bytes": 2**30}
    assert doc["nodes"]["b"]["oversubscription"] == {
        "enabled": False,
        "reason": "standalone: no cluster, nothing published or enforced",
    }


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "COLO_", "NODE_NAME"))}
    return {**env, **extra}


@pytest.mark.parametrize("output", ["json", "table"])
def test_once_exits_1_when_no_agent_answered(output: str) -> None:
    proc = subprocess.run(
        [*CONTROLLER, "--agent", "a=http://127.0.0.1:9", "--once", "--output", output],
        capture_output=True, text=True, timeout=60, env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "colo-controller: no agent answered in 1 cycle"
    if output == "json":
        assert json.loads(proc.stdout)["nodes"]["a"]["error"]


def test_the_demo_names_a_taken_address_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.3", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = clean_env(BIN=str(Path(sys.executable).parent), DEMO_PORT=str(port), TMPDIR=str(tmp_path),
                        DEMO_LISTEN="127.0.0.1:0")  # fmt: skip
        proc = subprocess.run(
            [str(ROOT / "demo" / "run.sh"), "--once", "--output", "json"],
            capture_output=True, text=True, timeout=60, env=env, cwd=ROOT,
        )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert f"address taken, nothing started: 127.0.0.3:{port}" in proc.stderr
    assert "DEMO_PORT" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def free_port_on_every_demo_address() -> int:
    """A port free on 127.0.0.2, .3 and .4 at once (the agents' addresses)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
            port = int(probe.getsockname()[1])
        try:
            for n in (2, 3, 4):
                with socket.socket() as s:
                    s.bind((f"127.0.0.{n}", port))
        except OSError:
            continue
        return port
    raise AssertionError("no port free on 127.0.0.2-4")


def default_sigint() -> None:
    """The demo as a terminal's shell starts it, with SIGINT's default action, however the suite was started (a
    suite run as a background job inherits SIGINT ignored, which bash cannot trap: the demo then never stops)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("when", ["while-agents-start", "while-polling"])
def test_ctrl_c_ends_the_demo_quietly_and_leaves_nothing(tmp_path: Path, when: str) -> None:
    """Ctrl-C as a terminal sends it (SIGINT to the whole foreground process group, agents' own handlers and all),
    as the agents start or once the controller polls them: exit 0, no agent reported stopped, the agents gone and
    no log directory left behind."""
    port = free_port_on_every_demo_address()
    env = clean_env(BIN=str(Path(sys.executable).parent), DEMO_PORT=str(port), TMPDIR=str(tmp_path),
                    DEMO_LISTEN="127.0.0.1:0", COLO_CONTROLLER_POLLING__INTERVAL="1s")  # fmt: skip
    demo = subprocess.Popen(
        [str(ROOT / "demo" / "run.sh"), "--output", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, start_new_session=True,
        preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        assert demo.stdout is not None and demo.stderr is not None
        if when == "while-agents-start":  # the first agent answers, the others may not yet
            assert demo.stderr.readline().startswith("demo: agent demo-node-1: ")
        else:
            first = demo.stdout.readline()  # the controller's first cycle: every agent is up and polled
            assert json.loads(first)["nodes"].keys() == {"demo-node-1", "demo-node-2", "demo-node-3"}
        assert len(list(tmp_path.iterdir())) == 1, "the agents' log directory exists while the demo runs"
        os.killpg(demo.pid, signal.SIGINT)
        _, err = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    assert demo.returncode == 0, err
    assert "stopped during the demo" not in err and "logs are kept" not in err
    assert list(tmp_path.iterdir()) == []
    for n in (2, 3, 4):  # every agent stopped: its address is free again
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((f"127.0.0.{n}", port))


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("setsid") is None, reason="needs make and setsid")
def test_ctrl_c_typed_on_a_terminal_ends_make_demo_with_exit_0(tmp_path: Path) -> None:
    """`make demo` on a real pseudo-terminal and Ctrl-C typed on it: the terminal's SIGINT reaches the controller
    alone (job control), so make itself exits 0 without "Interrupt", no alarm, nothing left in TMPDIR."""
    port = free_port_on_every_demo_address()
    bindir = Path(sys.executable).parent
    env = clean_env(DEMO_PORT=str(port), TMPDIR=str(tmp_path), DEMO_LISTEN="127.0.0.1:0",
                    COLO_CONTROLLER_POLLING__INTERVAL="1s")  # fmt: skip
    master, slave = pty.openpty()
    # setsid -c: a session of its own whose controlling terminal is the pty, as a login shell's; -o: the venv is
    # there already, make must not rebuild it
    cmd = ["setsid", "-c", "make", "-s", "demo", f"BIN={bindir}", "-o", f"{bindir}/colo-agent", "ARGS=--output json"]
    make = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT, close_fds=True)
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 240
        while b'"nodes"' not in seen and time.monotonic() < deadline and make.poll() is None:
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 65536)
        assert b'"nodes"' in seen, seen.decode(errors="replace")
        os.write(master, b"\x03")  # Ctrl-C, as typed
        make.wait(timeout=120)
        with contextlib.suppress(OSError):  # EIO once every writer to the pty is gone
            while select.select([master], [], [], 0.5)[0]:
                chunk = os.read(master, 65536)
                if not chunk:
                    break
                seen += chunk
    finally:
        if make.poll() is None:
            make.kill()
            make.wait()
        os.close(master)
    text = seen.decode(errors="replace")
    assert make.returncode == 0, text
    assert "Interrupt" not in text and "stopped during the demo" not in text and "logs are kept" not in text
    assert list(tmp_path.iterdir()) == []
