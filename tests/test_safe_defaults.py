"""Defaults that are safe on a user's own machine: the standalone controller listens on loopback, the standalone
agent keeps its windows in the per-user state directory, no directory is made that the user did not name, and
configuration files are read strictly (a key given twice is refused; YAML errors say file, line and column).
Processes run with HOME and XDG_STATE_HOME in a temporary directory: never the real ~ or /var/lib."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.config import POD_STATE_FILE, AgentConfig, user_state_dir
from common.config import ConfigError, parse_yaml, read_file
from controller.config import ControllerConfig, build_config, load_config

BIN = Path(sys.executable).parent


def env_in(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no COLO_* variables (the suite's own point the defaults away), HOME in tmp."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLO_") and k != "XDG_STATE_HOME"}
    return {**env, "HOME": str(tmp_path / "home"), **extra}


# the controller's address


def test_the_standalone_controller_listens_on_loopback_and_the_cluster_on_every_address() -> None:
    cfg = ControllerConfig()
    assert cfg.listen is None
    assert cfg.listen_in(standalone=True) == "127.0.0.1:8090"
    assert cfg.listen_in(standalone=False) == "0.0.0.0:8090"
    named = build_config({"listen": "0.0.0.0:9000"})
    assert named.listen_in(standalone=True) == named.listen_in(standalone=False) == "0.0.0.0:9000"


def test_the_shipped_controller_config_keeps_listening_on_every_address() -> None:
    cfg = load_config(str(Path(__file__).resolve().parents[1] / "deploy/daemonset/controller-config.yaml"))
    assert cfg.listen_in(standalone=False) == "0.0.0.0:8090"


def test_the_standalone_controller_says_where_it_listens(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [str(BIN / "colo-controller"), "--agent", "n=http://127.0.0.1:9", "--listen", "127.0.0.1:0"],
        env=env_in(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert "extender and metrics on http://127.0.0.1:" in line, line


# the agent's state file


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HOME": "/home/u"}, "/home/u/.local/state/colo"),
        ({"HOME": "/home/u", "XDG_STATE_HOME": "/x/state"}, "/x/state/colo"),
        ({"HOME": "/home/u", "XDG_STATE_HOME": ""}, "/home/u/.local/state/colo"),
        ({"HOME": "/home/u", "XDG_STATE_HOME": "relative"}, "/home/u/.local/state/colo"),  # XDG: ignore it
    ],
)
def test_the_per_user_state_directory(env: dict[str, str], expected: str) -> None:
    assert user_state_dir(env) == expected


def test_the_state_file_by_where_the_agent_runs() -> None:
    env = {"HOME": "/home/u"}
    assert AgentConfig().state_file_in(in_pod=True, env=env) == POD_STATE_FILE
    assert AgentConfig().state_file_in(in_pod=False, env=env) == "/home/u/.local/state/colo/windows.colowin"
    assert AgentConfig(state_file="").state_file_in(in_pod=True, env=env) == ""
    assert AgentConfig(state_file="/s/a.json").state_file_in(in_pod=False, env=env) == "/s/a.json"


def test_a_state_file_in_a_missing_directory_is_one_clear_error_and_makes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "deeper" / "state.json"
    result = subprocess.run(
        [str(BIN / "colo-agent"), "--standalone", "--listen", "127.0.0.1:0", "--state-file", str(missing)],
        env=env_in(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("colo-agent: --state-file: "), result.stderr
    assert f"directory {missing.parent} does not exist" in lines[0]
    assert not (tmp_path / "typo").exists()
    assert not (tmp_path / "home").exists(), "nothing made in the per-user directory either"


def test_the_variable_is_named_when_it_set_the_missing_directory(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(BIN / "colo-agent"), "--standalone", "--listen", "127.0.0.1:0"],
        env=env_in(tmp_path, COLO_STATE_FILE=str(tmp_path / "nope" / "s.json")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.startswith("colo-agent: COLO_STATE_FILE: "), result.stderr


def test_the_standalone_agent_keeps_its_windows_in_the_per_user_directory(tmp_path: Path) -> None:
    state = tmp_path / "xdg"
    proc = subprocess.Popen(
        [str(BIN / "colo-agent"), "--standalone", "--listen", "127.0.0.1:0"],
        env=env_in(tmp_path, XDG_STATE_HOME=str(state)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert "serving http://127.0.0.1:" in proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    path = state / "colo" / "windows.colowin"
    assert f"window state: {path}" in err, err
    assert f"window state saved to {path}" in err, err
    assert path.is_file()
    assert (state / "colo").stat().st_mode & 0o777 == 0o700
    assert not (tmp_path / "home").exists()


def test_the_standalone_agent_moves_its_windows_from_the_old_name(tmp_path: Path) -> None:
    """An agent-state.json left by an older agent in the per-user directory is read at start, and the first save
    writes windows.colowin (named for its binary format) and removes the old file."""
    from agent.windows.persist import save_windows
    from agent.windows.store import WindowStore

    directory = tmp_path / "xdg" / "colo"
    directory.mkdir(parents=True, mode=0o700)
    old = directory / "agent-state.json"
    store = WindowStore()
    for t in range(60):
        store.add(("node", "", "cpu"), float(t), 0.5)
    save_windows(store, str(old), node="test-node", mono_now=60.0, wall_now=time.time() - 5)
    proc = subprocess.Popen(
        [str(BIN / "colo-agent"), "--standalone", "--listen", "127.0.0.1:0", "--node-name", "test-node"],
        env=env_in(tmp_path, XDG_STATE_HOME=str(tmp_path / "xdg")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert "serving http://127.0.0.1:" in proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    new = directory / "windows.colowin"
    assert f"loaded window state {old}: 1 series" in err, err
    assert f"removed its old name {old}" in err, err
    assert new.read_bytes()[:8] == b"COLOWIN\0" and not old.exists()


# configuration files


def test_a_key_given_twice_is_refused_with_its_name_and_lines(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("interval: 1\nenforcement:\n  enabled: true\n  enabled: false\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_file(str(path))
    assert str(err.value) == (
        f"config file {path}: not valid YAML: line 4, column 3: duplicate key 'enabled' (first at line 3)"
    )


def test_a_yaml_error_names_file_line_and_column_in_plain_words(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("interval: 1\nlisten: [127.0.0.1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_file(str(path))
    message = str(err.value)
    assert message.startswith(f"config file {path}: not valid YAML: line 3, column 1: ")
    assert "<unicode string>" not in message and "\n" not in message


def test_a_configmap_without_api_version_is_read_as_a_configmap(tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text("kind: ConfigMap\ndata:\n  config.yaml: |\n    interval: 2\n", encoding="utf-8")
    assert read_file(str(path)) == {"interval": 2}


def test_a_duplicate_inside_a_configmaps_data_names_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\ndata:\n  config.yaml: |\n    a: 1\n    a: 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"data\.config\.yaml: not valid YAML: line 2, column 1: duplicate key 'a'"):
        read_file(str(path))


def test_an_environment_list_is_parsed_strictly_too() -> None:
    with pytest.raises(ConfigError, match="duplicate key 'a'"):
        parse_yaml("{a: 1, a: 2}", "COLO_X")


def test_the_program_reports_a_duplicate_key_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("interval: 1\ninterval: 2\n", encoding="utf-8")
    result = subprocess.run(
        [str(BIN / "colo-agent"), "--config", str(path), "--check"],
        env=env_in(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"colo-agent: invalid configuration: config file {path}: not valid YAML: line 2, column 1: "
        "duplicate key 'interval' (first at line 1)\n"
    )
