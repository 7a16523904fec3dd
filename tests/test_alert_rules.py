"""The alerts (deploy/daemonset/alerts.rules.yml and the PrometheusRule generated from it): they load in a real
promtool, its unit tests say which alerts fire and which stay quiet on the series fed, every alert says what to
look at and links its runbook, and every metric a rule or the dashboard queries is one the programs export (as
the generated reference lists them), so a renamed metric breaks the build rather than the pager."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.queries import dashboard_queries, promql_metric_names
from tests.test_docs_links import anchors
from tools import rulegen

ROOT = Path(__file__).resolve().parents[1]
RULES = rulegen.RULES
PROMETHEUS_RULE = rulegen.OUT
DASHBOARD = ROOT / "deploy" / "daemonset" / "grafana-dashboard.json"
REFERENCE = ROOT / "docs" / "reference" / "metrics.md"
OPERATIONS = ROOT / "docs" / "operations.md"
CASES = ROOT / "tests" / "data" / "alerts_test.yml"
ANNOTATION_CASES = ROOT / "tests" / "data" / "alerts_annotations_test.yml"
SEVERITIES = {"critical", "warning"}
#: Series the rules read that are not Colo's, and who exports them (docs/operations.md#alerts says so too).
EXTERNAL = {
    "up": "Prometheus, for every target it scrapes",
    "kube_daemonset_status_desired_number_scheduled": "kube-state-metrics",
    "apiserver_admission_webhook_fail_open_count": "kube-apiserver (a counter named _count, no _total)",
}
#: The sample names a family of each type exposes, from the name the reference lists (counters with _total).
SUFFIXES = {
    "gauge": ("",),
    "counter": ("", "_created"),  # applied to the base name: X_total and X_created
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}

promtool = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(promtool is None, reason="needs promtool (Debian: apt-get install prometheus)")


def rule_groups() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    assert isinstance(groups, list)
    return groups


def rules() -> Iterator[dict[str, Any]]:
    for group in rule_groups():
        yield from group["rules"]


def alerts() -> list[dict[str, Any]]:
    return [r for r in rules() if "alert" in r]


def exported_sample_names(reference: str) -> set[str]:
    """Every sample name the programs' families expose, from the reference's tables (`name` | type | ...)."""
    names: set[str] = set()
    for name, kind in re.findall(r"^\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \| (\w+) \|", reference, re.M):
        assert kind in SUFFIXES, f"{name}: unknown type {kind}"
        if kind == "counter":
            assert name.endswith("_total"), f"{name}: the reference lists counters with _total"
            base = name.removesuffix("_total")
            names |= {base + "_total", base + "_created"}
        else:
            names |= {name + suffix for suffix in SUFFIXES[kind]}
    return names


def unknown_names(exprs: dict[str, str], exported: set[str], recorded: set[str]) -> dict[str, set[str]]:
    """where -> the names its expression selects that nobody exports (a recording rule's name is exported by
    the rule itself)."""
    out: dict[str, set[str]] = {}
    for where, expr in exprs.items():
        names = promql_metric_names(expr) - exported - recorded - set(EXTERNAL)
        if names:
            out[where] = names
    return out


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert promtool is not None
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


# ---------------------------------------------------------------------------------------------------------
# promtool


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    done = run_promtool("check", "rules", str(RULES), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(list(rules()))} rules found" in done.stdout


@needs_promtool
def test_promtool_unit_tests_fire_and_stay_quiet_as_expected(tmp_path: Path) -> None:
    """alerts_test.yml against the rules with their annotations taken off (those cases check which alerts fire,
    with which labels and when; how an alert reads is the next test's)."""
    stripped = {"groups": [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
                           for g in rule_groups()]}  # fmt: skip
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(stripped, sort_keys=False), encoding="utf-8")
    cases = yaml.safe_load(CASES.read_text(encoding="utf-8"))
    (tmp_path / "cases.yml").write_text(yaml.safe_dump({**cases, "rule_files": ["rules.yml"]}), encoding="utf-8")
    done = run_promtool("test", "rules", "cases.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_promtool_unit_tests_read_the_annotations_as_shipped(tmp_path: Path) -> None:
    cases = yaml.safe_load(ANNOTATION_CASES.read_text(encoding="utf-8"))
    (tmp_path / "cases.yml").write_text(yaml.safe_dump({**cases, "rule_files": [str(RULES)]}), encoding="utf-8")
    done = run_promtool("test", "rules", "cases.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_a_wrong_expectation_fails_promtool(tmp_path: Path) -> None:
    """The harness can fail: an alert expected that the series do not raise."""
    cases = yaml.safe_load(ANNOTATION_CASES.read_text(encoding="utf-8"))
    (test,) = cases["tests"]
    test["alert_rule_test"] = [{"eval_time": "1m", "alertname": "ColoAgentDown",
                                "exp_alerts": [{"exp_labels": {"severity": "critical"}}]}]  # fmt: skip
    (tmp_path / "cases.yml").write_text(yaml.safe_dump({**cases, "rule_files": [str(RULES)]}), encoding="utf-8")
    done = run_promtool("test", "rules", "cases.yml", cwd=tmp_path)
    assert done.returncode != 0 and "ColoAgentDown" in done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cases = yaml.safe_load(CASES.read_text(encoding="utf-8"))
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in cases["tests"]:
        for case in test["alert_rule_test"]:
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names - firing == set(), "alerts never seen firing"
    assert names - quiet == set(), "alerts never seen quiet"
    assert (firing | quiet) - names == set(), "cases for alerts that do not exist"


# ---------------------------------------------------------------------------------------------------------
# what each alert says


def test_every_alert_has_a_severity_a_summary_a_description_and_its_runbook() -> None:
    sections = anchors(OPERATIONS)
    names = [a["alert"] for a in alerts()]
    assert len(names) == len(set(names)), "an alert defined twice"
    for alert in alerts():
        name = alert["alert"]
        assert re.fullmatch(r"Colo[A-Z][A-Za-z]+", name), name
        assert alert["labels"]["severity"] in SEVERITIES, name
        assert re.fullmatch(r"\d+[smh]", str(alert.get("for", ""))), f"{name}: no `for`: one bad scrape pages"
        notes = alert["annotations"]
        assert set(notes) == {"summary", "description", "runbook_url"}, name
        assert notes["summary"].strip() and len(notes["description"]) > 80, name
        assert notes["runbook_url"] == f"docs/operations.md#{name.lower()}", name
        assert name.lower() in sections, f"{name}: no section {name} in docs/operations.md"


def test_the_runbook_has_a_section_for_each_alert_and_none_other() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    documented = set(re.findall(r"^### (Colo[A-Za-z]+)\s*$", text, re.M))
    assert documented == {a["alert"] for a in alerts()}


def test_the_names_the_rules_match_on_are_the_manifests_names() -> None:
    """The job, the DaemonSet and the webhook the expressions name are those deploy/ creates: a renamed
    object would silence its alert."""

    def objects(path: Path) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]

    base = RULES.parent
    (daemonset,) = [o for o in objects(base / "agent-daemonset.yaml") if o["kind"] == "DaemonSet"]
    monitors = {
        o["metadata"]["name"]: o for o in objects(base / "servicemonitor.yaml") if o["kind"] == "ServiceMonitor"
    }
    (service,) = [o for o in objects(base / "agent-service.yaml") if o["kind"] == "Service"]
    (webhook_config,) = objects(base / "colocation-profiles" / "mutating-webhook.yaml")
    (webhook,) = webhook_config["webhooks"]
    job = service["metadata"]["name"]  # prometheus-operator's job label: the Service's name, without jobLabel
    assert "jobLabel" not in monitors["colo-agent"]["spec"]
    exprs = "\n".join(r["expr"] for r in rules())
    assert set(re.findall(r'\bjob="([^"]+)"', exprs)) == {job}
    meta = daemonset["metadata"]
    assert f'namespace="{meta["namespace"]}", daemonset="{meta["name"]}"' in exprs
    assert set(re.findall(r'fail_open_count\{name="([^"]+)"', exprs)) == {webhook["name"]}


# ---------------------------------------------------------------------------------------------------------
# the PrometheusRule


def test_the_prometheusrule_is_generated_from_the_rules_file() -> None:
    assert PROMETHEUS_RULE.read_text(encoding="utf-8") == rulegen.render(), "stale: run python -m tools.rulegen"


def test_the_prometheusrule_carries_the_rules_unchanged_in_colos_namespace() -> None:
    (doc,) = [d for d in yaml.safe_load_all(PROMETHEUS_RULE.read_text(encoding="utf-8")) if d is not None]
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"} and set(doc["spec"]) == {"groups"}
    assert doc["metadata"]["namespace"] == "colo-system"
    assert doc["spec"]["groups"] == rule_groups()


def test_rulegen_finds_a_stale_file(tmp_path: Path) -> None:
    out = tmp_path / "prometheusrule.yaml"
    assert rulegen.stale(out), "missing"
    out.write_text(rulegen.render().replace("for: 15m", "for: 1m"), encoding="utf-8")
    assert rulegen.stale(out), "edited by hand"
    out.write_text(rulegen.render(), encoding="utf-8")
    assert not rulegen.stale(out)


# ---------------------------------------------------------------------------------------------------------
# the metrics queried against the metrics exported


def test_every_metric_a_rule_or_the_dashboard_queries_is_exported() -> None:
    exported = exported_sample_names(REFERENCE.read_text(encoding="utf-8"))
    recorded = {r["record"] for r in rules() if "record" in r}
    exprs = {f"rule {r.get('alert') or r.get('record')}": r["expr"] for r in rules()}
    dashboard = yaml.safe_load(DASHBOARD.read_text(encoding="utf-8"))  # JSON is YAML
    exprs |= {f"dashboard query {i}": expr for i, expr in enumerate(dashboard_queries(dashboard))}
    assert unknown_names(exprs, exported, recorded) == {}
    used = set().union(*(promql_metric_names(e) for e in exprs.values()))
    assert set(EXTERNAL) <= used, f"listed as external but not queried: {set(EXTERNAL) - used}"
    assert not set(EXTERNAL) & exported, "a name both Colo's and external"


def test_the_check_catches_renamed_metrics_and_wrong_suffixes() -> None:
    reference = REFERENCE.read_text(encoding="utf-8")
    exported = exported_sample_names(reference)
    ok = {
        "colo_agent_snapshot_seq",  # gauge
        "colo_enforcement_writes_total", "colo_enforcement_writes_created",  # counter
        "colo_controller_cycle_duration_seconds_bucket", "colo_controller_cycle_duration_seconds_count",  # histogram
        "colo_controller_cycle_duration_seconds_sum",
    }  # fmt: skip
    wrong = {
        "colo_agent_snapshot_seq_total",  # a gauge with a counter's suffix
        "colo_enforcement_writes",  # a counter without _total selects nothing
        "colo_controller_cycle_duration_seconds",  # a histogram without its suffix
        "colo_agent_snapshot_sequence",  # renamed
        "colo_node_evicting_bucket",
    }
    assert ok <= exported and not wrong & exported
    exprs = {"renamed": "changes(colo_agent_snapshot_sequence[3m]) == 0", "ok": "changes(colo_agent_snapshot_seq[3m])",
             "recorded": "colo:node_batch_excess:ratio > 0.2"}  # fmt: skip
    assert unknown_names(exprs, exported, set()) == {
        "renamed": {"colo_agent_snapshot_sequence"},
        "recorded": {"colo:node_batch_excess:ratio"},
    }
    assert unknown_names(exprs, exported, {"colo:node_batch_excess:ratio"}) == {
        "renamed": {"colo_agent_snapshot_sequence"}
    }
    # a family dropped from the code disappears from the regenerated reference, and the rules' check fails
    without = reference.replace("| `colo_agent_snapshot_seq` |", "| `colo_agent_snapshot_seq_gone` |")
    rule_exprs = {r["alert"]: r["expr"] for r in alerts()}
    assert unknown_names(rule_exprs, exported_sample_names(without), set()) == {
        "ColoAgentSamplingStalled": {"colo_agent_snapshot_seq"}
    }
