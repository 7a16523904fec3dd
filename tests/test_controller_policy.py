"""Policy file (crane's DynamicSchedulerPolicy), Go durations, controller config and CLI exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.windows.store import WINDOW_NAMES
from controller.config import load_config
from controller.durations import parse_go_duration
from controller.errors import ConfigError
from controller.main import EXIT_CONFIG, main
from controller.policy import AGENT_WINDOWS, API_VERSION, KIND, default_policy, load_policy, parse_policy

REPO = Path(__file__).resolve().parent.parent


def test_default_policy_is_cranes() -> None:
    spec = default_policy().spec
    assert [(s.name, s.period) for s in spec.sync_policy] == [
        ("cpu_usage_avg_5m", 180.0),
        ("cpu_usage_max_avg_1h", 900.0),
        ("cpu_usage_max_avg_1d", 10800.0),
        ("mem_usage_avg_5m", 180.0),
        ("mem_usage_max_avg_1h", 900.0),
        ("mem_usage_max_avg_1d", 10800.0),
    ]
    assert [(p.name, p.max_limit_percent) for p in spec.predicate] == [
        ("cpu_usage_avg_5m", 0.65),
        ("cpu_usage_max_avg_1h", 0.75),
        ("mem_usage_avg_5m", 0.65),
        ("mem_usage_max_avg_1h", 0.75),
    ]
    assert [p.weight for p in spec.priority] == [0.2, 0.3, 0.5, 0.2, 0.3, 0.5]
    assert [(h.time_range, h.count) for h in spec.hot_value] == [(300.0, 5), (60.0, 2)]


def test_example_file_equals_default() -> None:
    assert load_policy(REPO / "deploy" / "controller-policy.example.yaml") == default_policy()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3m", 180), ("1h30m", 5400), ("500ms", 0.5), ("1.5h", 5400), ("3h", 10800), ("0", 0), ("2m3.5s", 123.5)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "3", "3x", "m", "1h 30m", "3mm"])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(text)


def _doc(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"syncPolicy": [{"name": "cpu_usage_avg_5m", "period": "3m"}]}
    base.update(spec)
    return {"apiVersion": API_VERSION, "kind": KIND, "spec": base}


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (_doc(syncPolicy=[{"name": "cpu_usage_avg_5m", "period": "3x"}]), "spec.syncPolicy[0].period"),
        (_doc(syncPolicy=[{"name": "cpu_usage_avg_5m", "period": 180}]), "spec.syncPolicy[0].period"),
        (_doc(syncPolicy=[{"name": "cpu_usage_avg_5m", "period": "-3m"}]), "spec.syncPolicy[0].period"),
        (_doc(syncPolicy=[{"name": "disk_usage", "period": "3m"}]), "spec.syncPolicy[0].name"),
        (_doc(predicate=[{"name": "cpu_usage_avg_5m", "maxLimitPercent": 0.6}]), "spec.predicate[0].maxLimitPercent"),
        (_doc(predicate=[{"name": "cpu_usage_avg_5m", "maxLimitPecent": 65}]), "spec.predicate[0].maxLimitPecent"),
        (_doc(predicate=[{"name": "mem_usage_avg_5m", "maxLimitPecent": 0.6}]), "spec.predicate[0].name"),
        (_doc(priority=[{"name": "cpu_usage_avg_5m", "weight": -1}]), "spec.priority[0].weight"),
        (_doc(priority=[{"name": "cpu_usage_avg_5m", "weight": 0}]), "spec.priority"),
        (_doc(hotValue=[{"timeRange": "5m", "count": 0}]), "spec.hotValue[0].count"),
        (_doc(hotValue=[{"timeRange": "soon", "count": 1}]), "spec.hotValue[0].timeRange"),
        ({**_doc(), "apiVersion": "v1"}, "apiVersion"),
        ({**_doc(), "kind": "Policy"}, "kind"),
        ({"apiVersion": API_VERSION, "kind": KIND}, "spec"),
    ],
)
def test_malformed_policy_names_the_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(doc)
    assert f"{field}:" in str(info.value)


def test_every_window_the_agent_serves_can_be_synced() -> None:
    for name in ("cpu_usage_avg_1m", "mem_usage_max_avg_1d", "cpu_usage_p95_5m", "mem_usage_p99_1h"):
        parse_policy(_doc(syncPolicy=[{"name": name, "period": "3m"}]))
    with pytest.raises(ConfigError, match=r"spec\.syncPolicy\[0\]\.name"):
        parse_policy(_doc(syncPolicy=[{"name": "cpu_usage_p42_5m", "period": "3m"}]))
    assert len(AGENT_WINDOWS) == 2 * len(WINDOW_NAMES)


def test_extender_max_priority_is_pinned_but_accepted(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("extender:\n  max_priority: 10\npolling:\n  interval: 3m\n")
    cfg = load_config(str(cfg_file))
    assert cfg.extender.max_priority == 10 and cfg.polling.interval == 180


def test_missing_sections_are_empty() -> None:
    spec = parse_policy(_doc()).spec
    assert spec.predicate == () and spec.priority == () and spec.hot_value == ()


def test_config_durations_and_unknown_keys(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("polling:\n  interval: 1m\n  timeout: 0.5\npolicy_file: p.yaml\n")
    cfg = load_config(str(cfg_file))
    assert cfg.polling.interval == 60.0 and cfg.polling.timeout == 0.5
    assert cfg.policy_file == str(tmp_path / "p.yaml")  # relative to the config file
    cfg_file.write_text("polling:\n  intervall: 1m\n")
    with pytest.raises(ConfigError, match=rf"^config file {cfg_file}: polling\.intervall: unknown key"):
        load_config(str(cfg_file))
    cfg_file.write_text("polling:\n  intervall:\n    seconds: 60\n")  # a misspelt section: the file still named
    with pytest.raises(ConfigError, match=rf"^config file {cfg_file}: polling\.intervall: unknown key"):
        load_config(str(cfg_file))


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ("polling:\n  timeout: 0\n", "polling.timeout"),
        ("polling:\n  concurrency: 0\n", "polling.concurrency"),
        ("agent:\n  port: 70000\n", "agent.port"),
        ("writer:\n  qps: -1\n", "writer.qps"),
        ("leader_election:\n  lease_duration: 5\n  renew_deadline: 10\n", "leader_election"),
        ("listen: nope\n", "listen"),
        ("polling:\n  interval: 4m\n", "polling.interval"),  # node_hot_value would go stale between cycles
        ("extender:\n  max_priority: 100\n", "extender.max_priority"),  # kube-scheduler assumes 10
        ("- a list\n", "<root>"),
    ],
)
def test_cli_bad_config_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, key: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(config)
    assert main(["--config", str(path)]) == EXIT_CONFIG
    assert f"{key}:" in capsys.readouterr().err


def test_cli_bad_policy_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    text = (REPO / "deploy" / "controller-policy.example.yaml").read_text().replace("count: 2", "count: two")
    policy.write_text(text)
    assert main(["--policy", str(policy)]) == EXIT_CONFIG
    assert "spec.hotValue[1].count:" in capsys.readouterr().err
    assert main(["--policy", str(tmp_path / "missing.yaml")]) == EXIT_CONFIG
    assert main(["--policy", str(REPO / "deploy" / "controller-policy.example.yaml"), "--check"]) == 0
