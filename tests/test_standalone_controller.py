"""The standalone controller against real standalone agents (subprocesses on loopback addresses): it
polls them, plans crane's annotations and scores as the leader would, prints them, serves the same HTTP
endpoints and writes nothing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import load_annotations as ann
from controller.policy import default_policy
from controller.scoring import Scorer

AGENT = [sys.executable, "-m", "colo_agent.main"]
CONTROLLER = [sys.executable, "-m", "controller.main"]
ROOT = Path(__file__).resolve().parent.parent
CRANE_VALUE = re.compile(r"\d+\.\d{5},\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "COLO_", "NODE_NAME"))}
    env.update(extra)
    return env


def get(url: str, body: bytes | None = None) -> Any:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    with urllib.request.urlopen(req, timeout=10) as r:
        data = r.read()
    return data.decode() if url.endswith("/metrics") else json.loads(data)


def start_agent(address: str, name: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [*AGENT, "--standalone", "--listen", f"{address}:0", "--interval", "0.2", "--state-file", "",
         "--node-name", name],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    assert proc.stdout is not None
    m = re.search(r"(http://[\d.]+:\d+)/metrics", proc.stdout.readline())
    assert m, proc.stderr.read() if proc.stderr else ""
    return proc, m.group(1)


@pytest.fixture(scope="module")
def agents() -> Iterator[dict[str, str]]:
    """Two standalone agents on 127.0.0.2 and 127.0.0.3, ready (first snapshot taken)."""
    started = [start_agent("127.0.0.2", "node-a"), start_agent("127.0.0.3", "node-b")]
    try:
        urls = {"node-a": started[0][1], "node-b": started[1][1]}
        deadline = time.monotonic() + 30
        for url in urls.values():
            while True:
                try:
                    # ready, and a CPU rate known (two passes): the first cycle then has every window
                    if get(url + "/readyz")["status"] == "ready" and get(url + "/api/v1/node")["cpu_cores"] is not None:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "agent never ready"
                time.sleep(0.1)
        yield urls
    finally:
        for proc, _ in started:
            proc.send_signal(signal.SIGTERM)
        for proc, _ in started:
            proc.communicate(timeout=30)


def agent_args(agents: dict[str, str]) -> list[str]:
    return [arg for name, url in agents.items() for arg in ("--agent", f"{name}={url}")]


def check_node(name: str, doc: dict[str, Any], now: float) -> None:
    """The annotations are crane's, byte for byte in format, and the score is what crane computes from them."""
    anns = doc["annotations"]
    scorer = Scorer(default_policy().spec)
    for metric in scorer.metric_names:
        if metric in anns:
            assert CRANE_VALUE.fullmatch(anns[metric]), anns[metric]
    assert "cpu_usage_avg_5m" in anns and "mem_usage_avg_5m" in anns, "the 5-minute windows have data at once"
    assert anns[ann.HOT_VALUE].startswith("0.00000,"), "no pods are known without a cluster"
    verdict = scorer.evaluate(name, scorer.parse(anns), now)
    assert doc["score"] == verdict.score and doc["overloaded"] == verdict.overloaded
    assert anns[ann.LOAD_SCORE].split(",")[0] == str(doc["score"])
    assert 0 <= doc["score"] <= 100 and doc["error"] is None


def test_once_prints_one_json_cycle(agents: dict[str, str]) -> None:
    proc = subprocess.run(
        [*CONTROLLER, *agent_args(agents), "--agent", "node-c=http://127.0.0.1:1", "--once", "--output", "json"],
        capture_output=True, text=True, timeout=60, env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    doc = json.loads(line)
    assert set(doc["nodes"]) == {"node-a", "node-b", "node-c"}
    for name in ("node-a", "node-b"):
        check_node(name, doc["nodes"][name], time.time())
        assert doc["nodes"][name]["agent"] == agents[name] + "/api/v1/node"
    down = doc["nodes"]["node-c"]
    assert down["error"] and down["annotations"][ann.LOAD_SCORE], "a dead agent is reported; its score still goes"
    assert ann.HOT_VALUE not in down["annotations"], "a hot value of 0 is what crane reads without one"
    assert "cpu_usage_avg_5m" not in down["annotations"]


def test_a_name_that_is_not_the_agents_node_is_explained(agents: dict[str, str]) -> None:
    proc = subprocess.run(
        [*CONTROLLER, "--agent", f"wrong={agents['node-a']}", "--once", "--output", "json"],
        capture_output=True, text=True, timeout=60, env=clean_env(),
    )  # fmt: skip
    error = json.loads(proc.stdout)["nodes"]["wrong"]["error"]
    assert "'node-a'" in error and "NAME in --agent NAME=URL" in error


def test_once_table(agents: dict[str, str]) -> None:
    proc = subprocess.run(
        [*CONTROLLER, *agent_args(agents), "--once", "--output", "table"],
        capture_output=True, text=True, timeout=60, env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "2 agents" in lines[0] and "nothing written" in lines[0] and lines[2].split()[:2] == ["NODE", "SCORE"]
    assert [line.split()[0] for line in lines[3:5]] == ["node-a", "node-b"]
    assert max(len(line) for line in lines) <= 100
    assert "\x1b" not in proc.stdout, "no screen control codes when stdout is not a terminal"


def test_serves_the_extender_and_metrics_and_stops_on_sigterm(agents: dict[str, str]) -> None:
    proc = subprocess.Popen(
        [*CONTROLLER, *agent_args(agents), "--listen", "127.0.0.1:0", "--output", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=clean_env(COLO_CONTROLLER_POLLING__INTERVAL="0.5s"),
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        m = re.search(r"(http://127\.0\.0\.1:\d+)", proc.stderr.readline())
        assert m
        base = m.group(1)
        cycles = [json.loads(proc.stdout.readline()) for _ in range(2)]
        for cycle in cycles:
            for name in agents:
                check_node(name, cycle["nodes"][name], time.time())
        second = cycles[1]["nodes"]["node-a"]
        assert "cpu_usage_max_avg_1h" not in second["would_patch"], "planned from what the first cycle 'wrote'"
        pod = {"metadata": {"name": "web", "namespace": "default"}, "spec": {}}
        args = json.dumps({"Pod": pod, "NodeNames": sorted(agents)}).encode()
        # a cycle every 0.5 s rescores the (real, busy) agents: compare with scores that held across the call
        for _ in range(50):
            scores = get(base + "/api/v1/scores")
            ranked = get(base + "/prioritize", args)
            if get(base + "/api/v1/scores") == scores:
                break
        else:
            pytest.fail("the scores never held across a /prioritize call")
        assert set(scores) == set(agents)
        assert [h["Host"] for h in ranked] == sorted(agents)
        expected = {name: (scores[name]["score"] * 10 + 50) // 100 for name in agents}
        assert {h["Host"]: h["Score"] for h in ranked} == expected
        filtered = get(base + "/filter", args)
        assert set(filtered["NodeNames"]) | set(filtered["FailedNodes"]) == set(agents)
        metrics = get(base + "/metrics")
        assert 'colo_build_info{program="colo-controller"' in metrics
        assert "process_resident_memory_bytes" in metrics and "colo_controller_node_load_score" in metrics
        for probe in ("/readyz", "/healthz"):
            with urllib.request.urlopen(base + probe, timeout=10) as r:
                assert r.status == 200 and r.read() == b"ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def free_port_on(*hosts: str) -> int:
    """A port free on every one of `hosts` right now."""
    import socket

    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = int(probe.getsockname()[1])
        try:
            for host in hosts[1:]:
                with socket.socket() as s:
                    s.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no common free port")


def test_make_demo_shows_three_nodes(tmp_path: Path) -> None:
    """`make demo`'s script, once: three agents on 127.0.0.2-4 and the controller's cycle over them."""
    port = free_port_on("127.0.0.2", "127.0.0.3", "127.0.0.4")
    env = clean_env(BIN=str(Path(sys.executable).parent), DEMO_PORT=str(port), TMPDIR=str(tmp_path))
    proc = subprocess.run(
        [str(ROOT / "demo" / "run.sh"), "--once", "--output", "json"],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.splitlines()[-1])
    assert sorted(doc["nodes"]) == ["demo-node-1", "demo-node-2", "demo-node-3"]
    for name, node in doc["nodes"].items():
        check_node(name, node, time.time())
    assert list(tmp_path.iterdir()) == [], "the demo removes its log directory"
