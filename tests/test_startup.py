"""Start-up as a user meets it, both programs run as subprocesses: every configuration, address and
kubeconfig problem is exactly one line on stderr naming the flag, variable or key, exit code 2, never a
traceback; the socket is bound before sampling or leader election; `--version` and `--help`."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from testsupport.kubeapi.server import FakeKubeAPI

AGENT = [sys.executable, "-m", "colo_agent.main"]
CONTROLLER = [sys.executable, "-m", "controller.main"]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without cluster or Colo variables (a pod's or a developer's shell may have them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "COLO_", "NODE_NAME"))}
    env.update(extra)
    return env


def run(cmd: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=dict(env or clean_env()))


def one_line(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1, f"expected one line, got:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other process (this test) listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


AGENT_BASE = ["--standalone", "--state-file", ""]


def test_agent_port_in_use_is_one_line_before_sampling(taken_port: int) -> None:
    proc = run([*AGENT, *AGENT_BASE, "--listen", f"127.0.0.1:{taken_port}"])
    one_line(proc, 2, "--listen", f"127.0.0.1:{taken_port}", "address already in use")
    assert proc.stdout == "", "nothing served, nothing sampled"


def test_agent_port_from_the_environment_names_the_variable(taken_port: int) -> None:
    proc = run([*AGENT, *AGENT_BASE], clean_env(COLO_LISTEN=f"127.0.0.1:{taken_port}"))
    one_line(proc, 2, "COLO_LISTEN", "address already in use")


def test_agent_port_from_the_file_names_the_file_and_key(taken_port: int, tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f'listen: "127.0.0.1:{taken_port}"\n')
    proc = run([*AGENT, *AGENT_BASE, "--config", str(cfg)])
    one_line(proc, 2, f"config file {cfg}: listen", "address already in use")


@pytest.mark.parametrize(
    ("args", "env", "needles"),
    [
        (["--listen", "no-such-host.invalid:9817"], {}, ("--listen", "cannot resolve host 'no-such-host.invalid'")),
        (["--listen", "127.0.0.1:http"], {}, ("--listen (listen)", "HOST:PORT")),
        (["--interval", "0"], {}, ("--interval (interval)",)),
        ([], {"COLO_INTERVAL": "0"}, ("COLO_INTERVAL (interval)", "got '0'")),
        ([], {"COLO_ENFORCEMENT__CPU_POLICY": "fast"}, ("COLO_ENFORCEMENT__CPU_POLICY (enforcement.cpu_policy)",)),
        ([], {"COLO_NO_SUCH_KEY": "1"}, ("COLO_NO_SUCH_KEY (no_such_key): unknown key",)),
        (["--config", "/nonexistent/agent.yaml"], {}, ("config file /nonexistent/agent.yaml",)),
        (["--no-such-flag"], {}, ("colo-agent: unrecognized arguments: --no-such-flag",)),
        (["--cgroup-driver", "systemdd"], {}, ("--cgroup-driver: invalid choice: 'systemdd'",)),
    ],
)
def test_agent_configuration_errors_are_one_line(args: list[str], env: dict[str, str], needles: tuple[str]) -> None:
    one_line(run([*AGENT, *AGENT_BASE, *args], clean_env(**env)), 2, *needles)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("enforcement:\n  cpu_polcy: fast\n", "enforcement.cpu_polcy"),  # a misspelt key
        ("qos:\n  cpu_brust:\n    enabled: true\n", "qos.cpu_brust"),  # a misspelt section, keys beneath it
        ("eviction:\n  cpu_high_watermark: 0.1\n  cpu_low_watermark: 0.5\n", "eviction"),  # a section's own rule
    ],
)
def test_agent_errors_in_a_nested_key_of_the_file_name_the_file(tmp_path: Path, text: str, key: str) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(text)
    one_line(run([*AGENT, *AGENT_BASE, "--config", str(cfg)], clean_env()), 2, f"config file {cfg}: {key}")


def test_agent_bad_kubeconfig_is_one_line() -> None:
    proc = run([*AGENT, "--kubeconfig", "/nonexistent", "--state-file", ""])
    one_line(proc, 2, "--kubeconfig /nonexistent")


def test_agent_without_kubepods_warns_once_and_says_what_happened_to_the_state(tmp_path: Path) -> None:
    """A cgroup root without kubepods starts (node figures still make sense) with one warning saying where
    it looked; at SIGTERM the log says the state was not saved because saving is off."""
    root = f"/colotest-no-such-root-{os.getpid()}"
    proc = subprocess.Popen(
        [*AGENT, *AGENT_BASE, "--listen", "127.0.0.1:0", "--interval", "0.2", "--cgroup-root", root],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert "serving http://127.0.0.1:" in proc.stdout.readline()
        time.sleep(1.0)  # a few passes: the warning must not repeat
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    warnings = [line for line in err.splitlines() if "kubepods" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0] and f"--cgroup-root {root}" in warnings[0], err
    assert "window state not saved: state_file is ''" in err and "window state saved" not in err


def test_agent_says_when_the_state_could_not_be_saved(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    directory.mkdir()
    state = directory / "state.bin"  # there at start; removed below, so saving fails
    proc = subprocess.Popen(
        [*AGENT, "--standalone", "--listen", "127.0.0.1:0", "--interval", "0.2", "--state-file", str(state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert "serving" in proc.stdout.readline()
        directory.rmdir()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"window state not saved: {state}" in err and "window state saved" not in err, err


def test_controller_without_a_cluster_says_how_to_try_it() -> None:
    one_line(run(CONTROLLER), 2, "no cluster", "--agent NAME=URL")


def test_controller_bad_kubeconfig_is_one_line() -> None:
    one_line(run([*CONTROLLER, "--kubeconfig", "/nonexistent"]), 2, "--kubeconfig /nonexistent")


@pytest.mark.parametrize(
    ("args", "env", "needles"),
    [
        (["--agent", "a=ftp://x"], {}, ("--agent 'a=ftp://x'", "http://")),
        (["--agent", "just-a-url"], {}, ("--agent 'just-a-url'", "NAME=URL")),
        (["--once"], {}, ("--once", "--agent")),
        (["--agent", "a=http://127.0.0.1:1", "--listen", "no-such-host.invalid:1"], {}, ("--listen", "cannot resolve")),
        (["--listen", "nope"], {}, ("--listen (listen)",)),
        ([], {"COLO_CONTROLLER_POLLING__TIMEOUT": "0s"}, ("COLO_CONTROLLER_POLLING__TIMEOUT (polling.timeout)",)),
        (["--policy", "/nonexistent/policy.yaml"], {}, ("policy file /nonexistent/policy.yaml",)),
    ],
)
def test_controller_configuration_errors_are_one_line(
    args: list[str], env: dict[str, str], needles: tuple[str]
) -> None:
    one_line(run([*CONTROLLER, *args], clean_env(**env)), 2, *needles)


def test_controller_standalone_port_in_use(taken_port: int) -> None:
    proc = run([*CONTROLLER, "--agent", "a=http://127.0.0.1:1", "--listen", f"127.0.0.1:{taken_port}"])
    one_line(proc, 2, "--listen", "address already in use")


def test_controller_binds_before_leader_election(taken_port: int, kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    """In a cluster a taken port stops start-up before the controller asks for the lease (or anything)."""
    kubeconfig = kube_api.kubeconfig(tmp_path / "kubeconfig")
    proc = run([*CONTROLLER, "--kubeconfig", kubeconfig, "--listen", f"127.0.0.1:{taken_port}"])
    one_line(proc, 2, "--listen", "address already in use")
    assert kube_api.requests == [], "no API request before the socket is bound"


def test_the_deploy_configmaps_check_as_shipped() -> None:
    """`--config` takes the manifests' ConfigMaps; the controller's policy ConfigMap next to it stands in for
    the path it is mounted at in the pod."""
    root = Path(__file__).resolve().parent.parent / "deploy" / "daemonset"
    proc = run([*CONTROLLER, "--config", str(root / "controller-config.yaml"), "--check"])
    assert proc.returncode == 0, proc.stderr
    assert '"policy_file": "' + str(root / "controller-policy.yaml") in proc.stdout
    assert '"kind": "DynamicSchedulerPolicy"' in proc.stdout


@pytest.mark.parametrize(("cmd", "prog"), [(AGENT, "colo-agent"), (CONTROLLER, "colo-controller")])
def test_version(cmd: list[str], prog: str) -> None:
    proc = run([*cmd, "--version"])
    assert proc.returncode == 0
    assert re.fullmatch(rf"{prog} \d+\.\d+\.\d+\S* \(Python 3\.\d+\.\d+\)\n", proc.stdout), proc.stdout


@pytest.mark.parametrize(("cmd", "prefix"), [(AGENT, "COLO_"), (CONTROLLER, "COLO_CONTROLLER_")])
def test_help_explains_the_variables(cmd: list[str], prefix: str) -> None:
    proc = run([*cmd, "--help"])
    assert proc.returncode == 0
    assert f"{prefix}<KEY>" in " ".join(proc.stdout.split())


@pytest.mark.parametrize("program", ["agent", "controller"])
def test_every_settings_flag_names_its_default_and_variable(program: str) -> None:
    from agent.config import build_flags as agent_flags
    from controller.main import build_flags as controller_flags

    flags = agent_flags() if program == "agent" else controller_flags()
    prefix = "COLO_" if program == "agent" else "COLO_CONTROLLER_"
    helps = {a.option_strings[0]: a.help or "" for a in flags.parser._actions if a.option_strings}
    assert set(flags.flag_of.values()) >= {"--listen", "--log-level", "--log-format", "--kubeconfig"}
    for key, flag in flags.flag_of.items():
        assert "default: " in helps[flag], flag
        assert f"env {prefix}{key.upper()}" in helps[flag], flag
    for flag, text in helps.items():
        assert text, f"{flag} has no help"


def test_common_imports_none_of_the_programs() -> None:
    """`common` sits below both programs: the controller importing it must not load the agent."""
    import ast

    root = Path(__file__).resolve().parent.parent / "common"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in {"agent", "controller", "exporter", "kube", "cgroup"}, (path, name)
