"""Uninstall (issue 22): `colo-controller --purge-node-state` removes Colo's annotations, taint and batch resources
from the nodes against the API server, touching nothing else and writing nothing the second time; and
deploy/uninstall.sh runs kubectl in the order that lets the workloads finish their shutdown before their RBAC
goes (checked with a recording stand-in for kubectl: the fake API server serves no discovery for a real one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from contract.annotations import BATCH_CPU, BATCH_MEMORY, OFFLINE_JOB_EVICTING
from controller.main import main
from controller.purge import batch_writes
from kube.quantity import parse_quantity
from tests.test_batch_readmission import kubelet_admits
from testsupport.kubeapi.fixtures import kube_api  # noqa: F401
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "deploy" / "uninstall.sh"
STAMP = "2026-11-22T10:00:00Z"

COLO_ANNOTATIONS = {
    "volcano.sh/oversubscription-cpu": "329",
    "volcano.sh/oversubscription-memory": "491615573",
    OFFLINE_JOB_EVICTING: "true",
    "cpu_usage_avg_5m": f"0.35212,{STAMP}",
    "cpu_usage_max_avg_1h": f"0.4,{STAMP}",
    "cpu_usage_max_avg_1d": f"0.5,{STAMP}",
    "mem_usage_avg_5m": f"0.2,{STAMP}",
    "mem_usage_max_avg_1h": f"0.2,{STAMP}",
    "mem_usage_max_avg_1d": f"0.2,{STAMP}",
    "node_hot_value": f"0.00000,{STAMP}",
    "colo.io/load-score": f"85,{STAMP}",
    "colo.io/oversubscription": f"329,491615573,{STAMP}",
}
#: What the operator (or others) set: stays.
KEPT_ANNOTATIONS = {"volcano.sh/oversubscription-types": "cpu,memory", "other.io/keep": "yes"}
OTHER_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def node_with_colo_state(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"volcano.sh/oversubscription": "true"},
                     "annotations": {**COLO_ANNOTATIONS, **KEPT_ANNOTATIONS}},
        "spec": {"taints": [OTHER_TAINT, {"key": OFFLINE_JOB_EVICTING, "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "8", "memory": "16Gi", BATCH_CPU: "329", BATCH_MEMORY: "491615573"},
            "allocatable": {"cpu": "8", "memory": "16Gi", BATCH_CPU: "329", BATCH_MEMORY: "491615573"},
        },
    }  # fmt: skip


def node_writes(api: FakeKubeAPI) -> list[Any]:
    return [r for r in api.requests if r.method in ("PATCH", "PUT", "POST") and r.path.startswith("/api/v1/nodes")]


def purge(api: FakeKubeAPI, tmp_path: Path, *extra: str) -> int:
    return main(["--purge-node-state", "--kubeconfig", api.kubeconfig(tmp_path / "kubeconfig"), *extra])


def test_purge_leaves_a_clean_node_and_nothing_else_touched(
    kube_api: FakeKubeAPI,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kube_api.put("nodes", node_with_colo_state("n1"))
    kube_api.put("nodes", {"metadata": {"name": "n2", "annotations": {"other.io/keep": "yes"}}, "status": {}})

    assert purge(kube_api, tmp_path, "--dry-run") == 0
    assert node_writes(kube_api) == [], "a dry run writes nothing"
    assert "(dry run) n1: removed annotations volcano.sh/oversubscription-cpu" in capsys.readouterr().out

    assert purge(kube_api, tmp_path) == 0
    out = capsys.readouterr().out
    n1 = kube_api.get("nodes", None, "n1")
    assert n1["metadata"]["annotations"] == KEPT_ANNOTATIONS
    assert n1["metadata"]["labels"] == {"volcano.sh/oversubscription": "true"}  # the operator's label stays
    assert n1["spec"]["taints"] == [OTHER_TAINT]
    for part in ("capacity", "allocatable"):
        assert n1["status"][part] == {"cpu": "8", "memory": "16Gi"}, part
    assert kube_api.get("nodes", None, "n2")["metadata"]["annotations"] == {"other.io/keep": "yes"}
    assert f"taint {OFFLINE_JOB_EVICTING}:NoSchedule" in out and f"status {BATCH_CPU}, {BATCH_MEMORY}" in out
    assert out.strip().endswith("2 nodes, 1 carried Colo's state, 0 failed")
    writes = node_writes(kube_api)
    # n1 only: one annotation PATCH, one guarded taint PATCH, one status PATCH
    assert [(r.path, r.content_type) for r in writes] == [
        ("/api/v1/nodes/n1", "application/merge-patch+json"),
        ("/api/v1/nodes/n1", "application/json-patch+json"),
        ("/api/v1/nodes/n1/status", "application/merge-patch+json"),
    ]

    # the controller writes as colo-controller: the Node's managedFields say so
    assert all(r.query.get("fieldManager") == "colo-controller" for r in writes)
    managed = {(e["manager"], e.get("subresource", "")) for e in n1["metadata"]["managedFields"]}
    assert managed == {("colo-controller", ""), ("colo-controller", "status")}

    assert purge(kube_api, tmp_path) == 0  # again: nothing left, nothing written
    assert len(node_writes(kube_api)) == len(writes)
    assert capsys.readouterr().out.strip() == "2 nodes, 0 carried Colo's state, 0 failed"


def batch_pod(name: str, node: str, cpu_milli: int, memory: int = 128 << 20, phase: str = "Running") -> dict[str, Any]:
    batch = {BATCH_CPU: str(cpu_milli), BATCH_MEMORY: str(memory)}
    return {"metadata": {"name": name, "namespace": "batch", "uid": f"uid-{name}"},
            "spec": {"nodeName": node,
                     "containers": [{"name": "c", "resources": {"requests": batch, "limits": batch}}]},
            "status": {"phase": phase}}  # fmt: skip


def batch_allocatable(api: FakeKubeAPI, node: str) -> dict[str, int]:
    alloc = (api.get("nodes", None, node) or {}).get("status", {}).get("allocatable") or {}
    return {k: int(parse_quantity(v)) for k, v in alloc.items() if k in (BATCH_CPU, BATCH_MEMORY)}


def requests(pod: dict[str, Any]) -> dict[str, int]:
    got = pod["spec"]["containers"][0]["resources"]["requests"]
    return {k: int(parse_quantity(v)) for k, v in got.items()}


def test_purge_lowers_the_batch_resources_to_what_batch_pods_still_request(
    kube_api: FakeKubeAPI,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The round-3 node: 400m left on it, one batch pod (100m) still running. kubelet re-admits running pods
    against allocatable at a restart, so the purge cannot remove batch-* under it; but with no agent left,
    anything above what it requests admits new batch pods nothing limits. The purge sets exactly what is
    requested, says so, and counts the node as carrying Colo's state."""
    node = node_with_colo_state("n1")
    for part in ("capacity", "allocatable"):
        node["status"][part].update({BATCH_CPU: "400", BATCH_MEMORY: str(1 << 30)})
    kube_api.put("nodes", node)
    running = batch_pod("job", "n1", 100, 256 << 20)
    kube_api.put("pods", running)
    kube_api.put("pods", batch_pod("done", "n1", 300, 256 << 20, phase="Succeeded"))
    assert purge(kube_api, tmp_path) == 0
    out = capsys.readouterr().out
    n1 = kube_api.get("nodes", None, "n1")
    assert n1["metadata"]["annotations"] == KEPT_ANNOTATIONS
    for part in ("capacity", "allocatable"):
        assert n1["status"][part][BATCH_CPU] == "100" and n1["status"][part][BATCH_MEMORY] == str(256 << 20), part
    assert f"set {BATCH_CPU} to 100m cpu, {BATCH_MEMORY} to {256 << 20} bytes" in out
    assert "1 nodes, 1 carried Colo's state, 0 failed; 1 keep batch resources" in out
    assert "--follow SECONDS lowers them" in out
    # kubelet's admission: the running pod is re-admitted at a restart, a new batch pod (250m) is not
    assert kubelet_admits(batch_allocatable(kube_api, "n1"), [requests(running), {BATCH_CPU: 250}]) == [True, False]
    assert kubelet_admits(batch_allocatable(kube_api, "n1"), [requests(running), {BATCH_CPU: 1}]) == [True, False]

    writes = len(node_writes(kube_api))
    assert purge(kube_api, tmp_path) == 0  # again: nothing to write, and said truthfully
    assert len(node_writes(kube_api)) == writes
    out = capsys.readouterr().out
    assert f"n1: kept {BATCH_CPU} at 100m cpu, {BATCH_MEMORY} at {256 << 20} bytes" in out
    assert "1 nodes, 1 carried Colo's state, 0 failed; 1 keep batch resources" in out

    running["status"]["phase"] = "Succeeded"
    kube_api.put("pods", running)
    assert purge(kube_api, tmp_path) == 0
    assert batch_allocatable(kube_api, "n1") == {}
    assert capsys.readouterr().out.strip().endswith("1 nodes, 1 carried Colo's state, 0 failed")


def test_purge_follow_lowers_as_the_batch_pods_finish_and_admits_nothing_new(
    kube_api: FakeKubeAPI,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--follow: after every finished batch pod the node carries exactly what the ones still running request
    (kubelet re-admits them, and admits no new batch pod), and nothing once the last one finished."""
    node = node_with_colo_state("n1")
    for part in ("capacity", "allocatable"):
        node["status"][part].update({BATCH_CPU: "400", BATCH_MEMORY: str(1 << 30)})
    kube_api.put("nodes", node)
    kube_api.put("nodes", {"metadata": {"name": "n2"}, "status": {"allocatable": {"cpu": "4"}}})
    pods = [batch_pod("a", "n1", 300), batch_pod("b", "n1", 100), batch_pod("c", "n1", 50)]
    for pod in pods:
        kube_api.put("pods", pod)
    kube_api.put("pods", batch_pod("elsewhere", "n2", 500))  # n2 carries no batch resources: not Colo's
    code: list[int] = []
    runner = threading.Thread(target=lambda: code.append(purge(kube_api, tmp_path, "--follow", "60")))
    runner.start()
    try:
        wait_for(lambda: batch_allocatable(kube_api, "n1").get(BATCH_CPU) == 450, what="lowered to 450m")
        new = {BATCH_CPU: 250, BATCH_MEMORY: 1 << 20}
        for done in range(len(pods)):
            still = pods[done:]
            want = sum(requests(p)[BATCH_CPU] for p in still)
            wait_for(lambda want=want: batch_allocatable(kube_api, "n1").get(BATCH_CPU, 0) == want,
                     what=f"batch-cpu {want}")  # fmt: skip
            alloc = batch_allocatable(kube_api, "n1")
            admitted = kubelet_admits(alloc, [*(requests(p) for p in still), new])
            assert admitted == [True] * len(still) + [False], (alloc, admitted)
            pods[done]["status"]["phase"] = "Succeeded" if done else "Failed"
            kube_api.put("pods", pods[done])
        wait_for(lambda: not runner.is_alive(), what="the follow ends with the last batch pod")
    finally:
        runner.join(timeout=90)
    assert code == [0]
    assert batch_allocatable(kube_api, "n1") == {}
    assert BATCH_CPU not in str(kube_api.get("nodes", None, "n2"))
    out = capsys.readouterr().out
    assert "following the batch pods of 1 nodes" in out
    assert f"n1: set {BATCH_CPU} to 150m cpu" in out and f"n1: set {BATCH_CPU} to 50m cpu" in out
    assert out.strip().endswith("no node carries batch resources any more")


def test_purge_follow_gives_up_after_its_time_and_says_where(
    kube_api: FakeKubeAPI,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kube_api.put("nodes", node_with_colo_state("n1"))
    kube_api.put("pods", batch_pod("long", "n1", 100))
    assert purge(kube_api, tmp_path, "--follow", "1") == 1
    captured = capsys.readouterr()
    assert "after 1s batch pods still run on n1" in captured.err
    assert batch_allocatable(kube_api, "n1")[BATCH_CPU] == 100


def test_purge_reports_a_failed_node_and_exits_1(
    kube_api: FakeKubeAPI,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kube_api.put("nodes", node_with_colo_state("n1"))
    kube_api.inject("PATCH", r"/api/v1/nodes/n1$", status=403, times=10)
    assert purge(kube_api, tmp_path) == 1
    assert "(failed:" in capsys.readouterr().out


def test_purge_flags_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dry-run"]) == 2
    assert "--dry-run is for --purge-node-state" in capsys.readouterr().err
    assert main(["--purge-node-state", "--agent", "n1=http://127.0.0.1:1"]) == 2
    missing = tmp_path / "missing"
    assert main(["--purge-node-state", "--kubeconfig", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    for bad in (["--follow", "10"], ["--purge-node-state", "--dry-run", "--follow", "10"]):
        assert main(bad) == 2
        assert "--follow is for --purge-node-state, without --dry-run" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["--purge-node-state", "--follow", "soon"])
    assert exit_info.value.code == 2
    assert "--follow needs a positive number of seconds, got 'soon'" in capsys.readouterr().err


# ---- deploy/uninstall.sh ---------------------------------------------------------------------------------


def run_script(
    tmp_path: Path, *args: str, pods_for: int = 1, cluster: dict[str, Any] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """uninstall.sh with testsupport/fake_kubectl.py as its kubectl, over `cluster` (nodes, pods)."""
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "testsupport" / "fake_kubectl.py"} "$@"\n')
    kubectl.chmod(0o755)
    state = {"nodes": [], "pods": [], **(cluster or {}), "colo_pods_for": pods_for}
    (tmp_path / "state.json").write_text(json.dumps(state), encoding="utf-8")
    log = tmp_path / "calls.log"
    env = {**os.environ, "KUBECTL": str(kubectl), "LOG": str(log), "STATE": str(tmp_path / "state.json"),
           "EVENTS": str(tmp_path / "events.jsonl")}  # fmt: skip
    proc = subprocess.run(["sh", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)
    calls = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return proc, calls


def script_events(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "events.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def test_uninstall_deletes_workloads_waits_for_their_pods_then_the_rest(tmp_path: Path) -> None:
    n1 = node_with_colo_state("n1")
    n2 = {"metadata": {"name": "n2"}, "spec": {}, "status": {"allocatable": {"cpu": "4"}}}
    proc, calls = run_script(tmp_path, "--purge", cluster={"nodes": [n1, n2]})
    assert proc.returncode == 0, proc.stderr
    assert calls[0] == "delete mutatingwebhookconfiguration colo-colocation-profiles --ignore-not-found"
    assert (
        calls[1]
        == "-n colo-system delete daemonset/colo-agent deployment/colo-controller --ignore-not-found --wait=false"
    )
    # polled until no Colo pod is left (the first answer still lists one); then the batch resources, at once
    # (no agent limits a batch pod any more); only then RBAC and namespace
    assert calls[2:4] == ["-n colo-system get pods -l app.kubernetes.io/part-of=colo -o name"] * 2
    assert calls[4].startswith("get pods --all-namespaces --field-selector=status.phase!=Succeeded")
    rest = calls.index(f"delete -k {ROOT / 'deploy' / 'daemonset'} --ignore-not-found")
    assert rest > max(i for i, c in enumerate(calls) if "--subresource=status" in c)
    annotate = calls[rest + 1].split()
    assert annotate[:3] == ["annotate", "nodes", "--all"]
    assert {"volcano.sh/offline-job-evicting-", "colo.io/load-score-", "node_hot_value-", "cpu_usage_avg_5m-"} <= set(
        annotate
    )
    assert "taint node n1 volcano.sh/offline-job-evicting:NoSchedule-" in calls
    assert not [c for c in calls if c.startswith("taint node n2")]
    # no batch pod anywhere: n1's batch resources go, n2 (which carries none) is not written
    status = [c for c in calls if "--subresource=status" in c]
    assert [c.split()[1] for c in status] == ["node/n1"]
    assert '"kubernetes.io/batch-cpu":null' in status[0] and '"kubernetes.io/batch-memory":null' in status[0]
    assert "n1: kubernetes.io/batch-* removed" in proc.stdout
    assert "done: no node carries batch resources" in proc.stdout


def script_pod(name: str, node: str | None, cpu: str, memory: str, **extra: Any) -> dict[str, Any]:
    batch = {BATCH_CPU: cpu, BATCH_MEMORY: memory}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": batch, "limits": batch}}]}
    if node:
        spec["nodeName"] = node
    spec.update(extra)
    return {"metadata": {"name": name, "namespace": "batch"}, "spec": spec, "status": {"phase": "Running"}}


def test_uninstall_follows_the_batch_pods_until_the_last_one_finished(tmp_path: Path) -> None:
    """The uninstall sets each node's batch resources to what its running batch pods request and lowers them as
    they finish (here one finishes after every read of the pods): after each write kubelet re-admits the
    pods it read and admits no new batch pod; at the end no node carries any. Quantities as kubectl prints
    them (1k, 256Mi), an init container larger than the app (kubelet's rule), a pod not bound yet."""
    nodes = [node_with_colo_state("n1"), node_with_colo_state("n3")]
    for node in nodes:
        for part in ("capacity", "allocatable"):
            node["status"][part].update({BATCH_CPU: "2k", BATCH_MEMORY: "4Gi"})
    init = [{"name": "fetch", "resources": {"requests": {BATCH_CPU: "600", BATCH_MEMORY: "1Gi"}}}]
    pods = [
        script_pod("a", "n1", "300", "256Mi"),
        script_pod("b", "n1", "100", "128Mi"),
        script_pod("d", "n3", "200", "512Mi", initContainers=init),  # holds max(600, 200) m, 1Gi
        script_pod("pending", None, "1k", "1Gi"),
    ]
    by_name = {p["metadata"]["name"]: p for p in pods}
    held = {"a": (300, 256 << 20), "b": (100, 128 << 20), "d": (600, 1 << 30)}
    cluster = {"nodes": nodes, "pods": pods, "finish_after_read": True}
    proc, _ = run_script(tmp_path, pods_for=0, cluster=cluster)  # the batch resources: with or without --purge
    assert proc.returncode == 0, proc.stderr
    read: list[str] = []
    writes = 0
    for event in script_events(tmp_path):
        if "read" in event:
            read = [n for n in event["read"] if by_name[n]["spec"].get("nodeName")]
            continue
        writes += 1
        node = event["patch"]
        alloc = {k: int(parse_quantity(v)) for k, v in event["allocatable"].items() if k in (BATCH_CPU, BATCH_MEMORY)}
        there = [n for n in read if by_name[n]["spec"]["nodeName"] == node]
        want = {BATCH_CPU: sum(held[n][0] for n in there), BATCH_MEMORY: sum(held[n][1] for n in there)}
        assert alloc == {k: v for k, v in want.items() if v}, (node, there, alloc)
        running = [{BATCH_CPU: held[n][0], BATCH_MEMORY: held[n][1]} for n in there]
        assert kubelet_admits(alloc, [*running, {BATCH_CPU: 1, BATCH_MEMORY: 1}]) == [True] * len(running) + [False]
    assert writes == 5  # n1: 400m, 100m, gone; n3: 600m, gone
    state = json.loads((tmp_path / "state.json").read_text(encoding="utf-8"))
    assert all(BATCH_CPU not in json.dumps(n["status"]) for n in state["nodes"])
    assert "n1: kubernetes.io/batch-* at what its running batch pods request (100m cpu, 134217728 bytes)" in proc.stdout


def test_uninstall_gives_up_on_the_batch_pods_after_its_timeout_and_names_the_nodes(tmp_path: Path) -> None:
    """--batch-timeout 0: one pass (the batch resources at what the running pods request), the rest of the
    uninstall done, and exit code 1 naming the node where batch pods still run."""
    node = node_with_colo_state("n1")
    cluster = {"nodes": [node], "pods": [script_pod("long", "n1", "100", "1Mi")]}
    proc, calls = run_script(tmp_path, "--purge", "--batch-timeout", "0", pods_for=0, cluster=cluster)
    assert proc.returncode == 1
    assert "batch pods still run on: n1" in proc.stderr
    state = json.loads((tmp_path / "state.json").read_text(encoding="utf-8"))
    assert state["nodes"][0]["status"]["allocatable"][BATCH_CPU] == "100"
    assert any(c.startswith("delete -k") for c in calls) and any(c.startswith("annotate nodes") for c in calls)


def test_uninstall_keeps_rbac_while_pods_are_still_shutting_down(tmp_path: Path) -> None:
    proc, calls = run_script(tmp_path, "--timeout", "0", pods_for=100)
    assert proc.returncode == 1
    assert "still shutting down" in proc.stderr
    assert not [c for c in calls if c.startswith("delete -k")], "RBAC must outlive the pods' shutdown"


def test_uninstall_without_purge_leaves_annotations_and_taint_alone(tmp_path: Path) -> None:
    """Without --purge the annotations and the taint stay (a reinstall right away); batch resources no pod
    holds go all the same: no agent limits a batch pod any more."""
    proc, calls = run_script(tmp_path, pods_for=0, cluster={"nodes": [node_with_colo_state("n1")]})
    assert proc.returncode == 0, proc.stderr
    assert calls[-1].startswith("delete -k") and "--purge" in proc.stdout
    assert not [c for c in calls if c.startswith(("annotate", "taint"))]
    state = json.loads((tmp_path / "state.json").read_text(encoding="utf-8"))
    assert BATCH_CPU not in json.dumps(state["nodes"][0]["status"])
    assert state["nodes"][0]["metadata"]["annotations"]["volcano.sh/oversubscription-cpu"] == "329"


def test_uninstall_refuses_bad_arguments(tmp_path: Path) -> None:
    proc, calls = run_script(tmp_path, "--timeout", "soon")
    assert proc.returncode == 2 and calls == [] and "whole seconds" in proc.stderr
    proc, calls = run_script(tmp_path, "-k", str(tmp_path))
    assert proc.returncode == 2 and calls == [] and "kustomization.yaml" in proc.stderr
    proc, calls = run_script(tmp_path, "--batch-timeout", "1h")
    assert proc.returncode == 2 and calls == [] and "--batch-timeout must be whole seconds" in proc.stderr


@pytest.mark.parametrize(
    ("status", "held", "writes"),
    [
        # exactly what is held, in the server's own form ("2k"): nothing to write
        ({"capacity": {BATCH_CPU: "2k"}, "allocatable": {BATCH_CPU: "2k"}}, (2000, 0), {}),
        # more than is held: down to it; a resource no pod requests: removed (a request of 0 fits)
        (
            {
                "capacity": {BATCH_CPU: "400", BATCH_MEMORY: "1Gi"},
                "allocatable": {BATCH_CPU: "400", BATCH_MEMORY: "1Gi"},
            },
            (100, 0),
            {BATCH_CPU: "100", BATCH_MEMORY: None},
        ),
        # less than is held (a pod placed in a race): up to it, or kubelet would reject it at a restart
        ({"capacity": {BATCH_CPU: "100"}, "allocatable": {BATCH_CPU: "100"}}, (300, 0), {BATCH_CPU: "300"}),
        # capacity and allocatable apart: both written
        ({"capacity": {BATCH_CPU: "300"}, "allocatable": {BATCH_CPU: "200"}}, (300, 0), {BATCH_CPU: "300"}),
        # nothing of Colo's on the node: nothing added, whatever its pods request
        ({"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}, (300, 1 << 20), {}),
    ],
)
def test_batch_writes_bring_a_node_to_what_its_batch_pods_hold(
    status: dict[str, Any], held: tuple[int, int], writes: dict[str, str | None]
) -> None:
    assert batch_writes({"metadata": {"name": "n1"}, "status": status}, held) == writes
