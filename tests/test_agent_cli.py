"""`colo-agent` as a user runs it: configuration errors exit 2 naming the key; standalone mode serves this
machine's numbers and saves its windows on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agent.config import ConfigError, load_config
from contract.agent_api import parse_pods_document
from controller.policy import AGENT_WINDOWS
from controller.poller import parse_sample

AGENT = [sys.executable, "-m", "colo_agent.main"]


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--interval", "0"], {}, "interval"),
        (["--listen", "localhost"], {}, "listen"),
        (["--host-root", "relative/path"], {}, "host_root"),
        ([], {"COLO_ENFORCEMENT__CPU_SUPPRESS_THRESHOLD": "1.5"}, "enforcement.cpu_suppress_threshold"),
        ([], {"COLO_OVERSUBSCRIPTION__PEAK_WINDOW": "max_avg_1w"}, "peak_window"),
        ([], {"COLO_NO_SUCH_KEY": "1"}, "no_such_key"),
    ],
)
def test_bad_configuration_names_the_key(argv: list[str], env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(argv, env)
    assert needle in str(info.value)


def test_file_env_flag_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("interval: 2\nlog_level: debug\nenforcement:\n  eviction:\n    cpu_high_watermark: 90\n")
    c = load_config(["--config", str(cfg), "--interval", "3"], {"COLO_LOG_LEVEL": "warning", "NODE_NAME": "n1"})
    assert (c.interval, c.log_level, c.node_name) == (3.0, "warning", "n1")
    assert c.enforcement.eviction.cpu_high_watermark == 90
    with pytest.raises(ConfigError, match="high_watermark must be above"):
        load_config([], {"COLO_ENFORCEMENT__EVICTION__CPU_HIGH_WATERMARK": "20"})
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(["--config", str(bad)], {})


def test_exit_code_2_on_bad_value() -> None:
    proc = subprocess.run([*AGENT, "--interval", "-1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "interval" in proc.stderr


def test_standalone_serves_and_saves_state_on_sigterm(tmp_path: Path) -> None:
    state = tmp_path / "state.bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    proc = subprocess.Popen(
        [*AGENT, "--standalone", "--listen", "127.0.0.1:0", "--interval", "0.2", "--state-file", str(state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert m, line
        base = f"http://127.0.0.1:{m.group(1)}"
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(base + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.1)
        with urllib.request.urlopen(base + "/healthz", timeout=5) as r:
            assert r.status == 200
        time.sleep(0.6)
        with urllib.request.urlopen(base + "/api/v1/node", timeout=5) as r:
            body = r.read()
        node = json.loads(body)
        # golden: the controller's parser takes this machine's real document, every window included
        sample = parse_sample(node["node_name"], body, sorted(AGENT_WINDOWS), 0.0)
        assert sample.windows["cpu_usage_avg_1m"] == node["windows"]["cpu_usage_avg_1m"]["value"]
        assert sample.oversubscription is None  # standalone: nothing published
        assert node["cpu_cores"] is not None and 0 <= node["cpu_usage_ratio"] <= 1
        assert 0 < node["memory_usage_ratio"] < 1 and node["memory_used_bytes"] > 0
        assert "cpu_usage_avg_5m" in node["windows"] and "coverage" in node["windows"]["cpu_usage_avg_5m"]
        assert node["oversubscription"]["enabled"] is False and node["enforcement"]["enabled"] is False
        with urllib.request.urlopen(base + "/api/v1/pods", timeout=5) as r:
            pods_body = r.read()
        assert isinstance(json.loads(pods_body), list)
        parse_pods_document(pods_body)  # the contract's model takes it
        with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
            text = r.read().decode()
        assert "colo_node_cpu_usage_ratio" in text and "colo_node_memory_used_bytes" in text
        for docs in ("/docs", "/redoc", "/openapi.json"):  # off unless serving.api_docs
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(base + docs, timeout=5)
            assert err.value.code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert state.exists() and state.stat().st_size > 0


def test_environment_ignores_service_links_and_keeps_strings() -> None:
    env = {
        "COLO_AGENT_SERVICE_HOST": "10.0.0.1",  # a Service named colo-agent in the namespace
        "COLO_AGENT_SERVICE_PORT": "9817",
        "COLO_AGENT_SERVICE_PORT_METRICS": "9817",
        "COLO_AGENT_PORT": "tcp://10.0.0.1:9817",
        "COLO_AGENT_PORT_9817_TCP": "tcp://10.0.0.1:9817",
        "COLO_AGENT_PORT_9817_TCP_PROTO": "tcp",
        "COLO_AGENT_PORT_9817_TCP_PORT": "9817",
        "COLO_AGENT_PORT_9817_TCP_ADDR": "10.0.0.1",
        "COLO_NODE_NAME": "on",  # stays the string "on", not YAML's True
        "COLO_AGGREGATE_LABEL_KEYS": "[team, quota.scheduling.koordinator.sh/name]",
        "COLO_STATE_FILE": "",
    }
    c = load_config([], env)
    assert c.node_name == "on" and c.state_file == ""
    assert c.aggregate_label_keys == ("team", "quota.scheduling.koordinator.sh/name")
    with pytest.raises(ConfigError, match="COLO_AGGREGATE_LABEL_KEYS"):
        load_config([], {"COLO_AGGREGATE_LABEL_KEYS": "[a, b"})


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"COLO_SERVING__AUTHENTICATE": "true"}, "needs a cluster"),
        # files that are there but hold no certificate (missing ones: self-signed, tests/test_selfsigned_serving.py)
        ({"COLO_SERVING__TLS_CERT_FILE": "/dev/null", "COLO_SERVING__TLS_KEY_FILE": "/dev/null"}, "/dev/null"),
        ({"COLO_SERVING__TLS_CERT_FILE": "/nonexistent/tls.crt"}, "go together"),
    ],
)
def test_serving_settings_that_cannot_work_exit_2_with_one_line(env: dict[str, str], needle: str) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    proc = subprocess.run(
        [*AGENT, "--standalone", "--listen", "127.0.0.1:0", "--state-file", ""],
        capture_output=True, text=True, timeout=60, env={**base, **env},
    )  # fmt: skip
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("colo-agent:")]
    assert "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr
