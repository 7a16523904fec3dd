"""The contract between colo-agent and colo-controller: the agent's real documents through the controller's
parser, the models describing exactly the fields the agent writes, the controller loading no agent code,
bad agent values rejected and counted, and the extender reading the agent's own capacity annotations."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

import agent.cluster.link
import contract.classify
from contract.agent_api import NodeDocument, Oversubscription, PodUsage, Window, parse_pods_document
from contract.windows import NODE_WINDOW_KEYS
from controller import load_annotations as ann
from controller.policy import AGENT_WINDOWS, default_policy
from controller.poller import SampleRejected, parse_sample
from controller.service import Controller
from exporter.app import close_app, create_app
from kube import Kube
from tests.controller_fleet import T0, Clock, add_slice, config, fleet_fixture, run_cycle, start_synced, started_fixture  # noqa: F401
from testsupport.agent_document import agent_view, real_node_document
from testsupport.agentfleet import AgentFleet, agent_payload
from testsupport.kubeapi.fixtures import kube, kube_api  # noqa: F401
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.waiting import wait_for


def _fields(model: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


# ---- golden: the agent's own documents ----------------------------------------------------------------


@pytest.fixture
def agent_app() -> Iterator[TestClient]:
    """The agent's real HTTP app over a view the agent's own code filled (400 ticks, cluster sections)."""
    app = create_app(agent_view("node-a", cpu_ratio=0.4, memory_ratio=0.5))
    try:
        with TestClient(app) as client:
            yield client
    finally:
        close_app(app)


def test_the_agents_node_document_through_the_controllers_parser(agent_app: TestClient) -> None:
    resp = agent_app.get("/api/v1/node")
    assert resp.status_code == 200
    doc = resp.json()
    sample = parse_sample("node-a", resp.content, sorted(AGENT_WINDOWS), T0)
    assert sample.node == "node-a" and set(sample.windows) == AGENT_WINDOWS
    for key, value in sample.windows.items():
        assert value == doc["windows"][key]["value"], key
    assert sample.windows["cpu_usage_avg_5m"] == pytest.approx(0.4)
    assert sample.windows["mem_usage_max_avg_1h"] == pytest.approx(0.5)
    over = doc["oversubscription"]
    assert over["enabled"] is True and over["reason"] == "computed"
    assert sample.oversubscription == ann.Oversubscription(over["cpu_millicores"], over["memory_bytes"])
    assert sample.oversubscription.cpu_millicores > 0 and sample.oversubscription.memory_bytes > 0


def test_the_models_describe_exactly_what_the_agent_writes(agent_app: TestClient) -> None:
    node = agent_app.get("/api/v1/node").json()
    assert set(node) == _fields(NodeDocument)  # every field required, none the model does not know
    assert set(node["windows"]) == set(NODE_WINDOW_KEYS)
    assert all(set(w) == _fields(Window) for w in node["windows"].values())
    assert set(node["oversubscription"]) == _fields(Oversubscription)
    pods_body = agent_app.get("/api/v1/pods").content
    pods = json.loads(pods_body)
    assert len(pods) == 2 and all(set(p) == _fields(PodUsage) for p in pods)
    parsed = parse_pods_document(pods_body)
    assert [p.uid for p in parsed] == [p["uid"] for p in pods] and parsed[1].pod_class == "offline"


def test_a_required_field_missing_from_the_agent_is_an_error_not_a_zero() -> None:
    # `qos` came later (additive): an agent from before it is read with an empty section
    optional = {k for k, f in NodeDocument.model_fields.items() if not f.is_required()}
    assert optional == {"qos"}
    doc = real_node_document("n1", 0.3)
    del doc["qos"]
    assert parse_sample("n1", json.dumps(doc), sorted(AGENT_WINDOWS), T0).node == "n1"
    for key in sorted(_fields(NodeDocument) - optional):
        doc = real_node_document("n1", 0.3)
        del doc[key]
        with pytest.raises(SampleRejected, match=key) as info:
            parse_sample("n1", json.dumps(doc), sorted(AGENT_WINDOWS), T0)
        assert info.value.rejection == "missing_field"


# ---- one implementation, no agent code in the controller ----------------------------------------------


def test_classification_is_one_implementation() -> None:
    assert agent.cluster.link.Classifier is contract.classify.Classifier


def _loaded_after(code: str) -> list[str]:
    script = f"import sys\n{code}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.split()


def test_the_controller_loads_no_agent_or_exporter_module() -> None:
    code = "import pkgutil, importlib, controller\n" + (
        "for m in pkgutil.walk_packages(controller.__path__, 'controller.'): importlib.import_module(m.name)"
    )
    loaded = _loaded_after(code)
    assert {"controller.service", "controller.rebalance.traits", "contract.agent_api"} <= set(loaded)
    assert [
        m for m in loaded if m.split(".")[0] in ("agent", "exporter", "colo_agent", "bench", "tests", "testsupport")
    ] == []


def test_the_contract_loads_neither_program_nor_the_kubernetes_client() -> None:
    loaded = _loaded_after("import contract.agent_api, contract.annotations, contract.classify, contract.windows")
    roots = {m.split(".")[0] for m in loaded}
    assert roots.isdisjoint({"agent", "exporter", "controller", "kube", "kubernetes", "cgroup"})


# ---- the controller against bad agents (issue 15: values from agents are trusted) ----------------------


def add_node(api: FakeKubeAPI, name: str, port: int, annotations: dict[str, str] | None = None) -> None:
    api.put(
        "nodes",
        {
            "metadata": {"name": name, "annotations": annotations or {}},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}],
                "allocatable": {"cpu": "8", "memory": "16Gi"},
            },
        },
    )
    add_slice(api, name, port)


def annotations_of(api: FakeKubeAPI, name: str) -> dict[str, str]:
    obj = api.get("nodes", None, name)
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


def _with(path: str, value: Any) -> bytes:
    doc = real_node_document("n", 0.3)
    *parents, last = path.split(".")
    target = doc
    for key in parents:
        target = target[key]
    target[last] = value
    return json.dumps(doc).encode()  # NaN and Infinity as Python writes them


def test_bad_samples_are_rejected_counted_and_never_written(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> None:
    bad = {
        "ratio-7-5": (_with("windows.cpu_usage_avg_5m.value", 7.5), "out_of_range"),
        "ratio-1e308": (_with("windows.mem_usage_max_avg_1h.value", 1e308), "out_of_range"),
        "nan": (_with("windows.mem_usage_avg_5m.value", math.nan), "not_finite"),
        "over-1e300": (_with("oversubscription.memory_bytes", 10**300), "out_of_range"),
        "renamed": (json.dumps({**real_node_document(None, 0.3), "windows": {}}).encode(), "missing_field"),
    }
    for name, (body, _) in bad.items():
        add_node(kube_api, name, fleet.add(name, body))
    add_node(kube_api, "good", fleet.add("good", agent_payload("good", 0.3)))
    c = start_synced(kube, config(), started)
    run_cycle(c)

    assert annotations_of(kube_api, "good")["cpu_usage_avg_5m"] == "0.30000,2026-11-22T10:00:00Z"
    for name in bad:
        written = annotations_of(kube_api, name)
        # as for any failed poll: the node's own score (a hot value of 0 needs no write), no load from the bad sample
        assert set(written) == {ann.LOAD_SCORE}, name
        assert all(len(v) < 40 for v in written.values())
    sample = c.metrics.registry.get_sample_value
    for reason in ("out_of_range", "not_finite", "missing_field"):
        expected = sum(1 for _, r in bad.values() if r == reason)
        assert sample("colo_controller_agent_samples_rejected_total", {"reason": reason}) == expected, reason
    assert sample("colo_controller_nodes_poll_failed_total", {"reason": "bad_payload"}) == len(bad)


# ---- publish each fact once: the agent's capacity annotations ------------------------------------------


OFFLINE_POD = {"metadata": {"name": "batch", "namespace": "default", "labels": {"koordinator.sh/qosClass": "BE"}}}


def published(cpu: int, memory: int) -> dict[str, str]:
    return {ann.PUBLISHED_CPU: str(cpu), ann.PUBLISHED_MEMORY: str(memory)}


def test_the_extender_reads_the_agents_capacity_and_the_old_copy_goes(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> None:
    old_copy = {ann.OVERSUBSCRIPTION: "9000,9663676416,2026-11-22T09:00:00Z"}
    add_node(kube_api, "big", fleet.add("big", agent_payload("big", 0.3)), {**published(6000, 8 << 30), **old_copy})
    add_node(kube_api, "small", fleet.add("small", agent_payload("small", 0.3)), published(1500, 2 << 30))
    # above its 8 cores of allocatable: ignored, counted
    add_node(kube_api, "liar", fleet.add("liar", agent_payload("liar", 0.3)), published(80000, 2 << 30))
    c = start_synced(kube, config(), started)
    sample = c.metrics.registry.get_sample_value
    assert sample("colo_controller_node_capacity_rejected_total", {"reason": "out_of_range"}) == 1
    hosts = ["small", "big", "liar"]
    # Before any cycle the load annotations are missing: the agents' capacity is not known to be current.
    assert [h["Score"] for h in c.extender.prioritize(OFFLINE_POD, None, hosts)] == [0, 0, 0]

    run_cycle(c)
    big = annotations_of(kube_api, "big")
    assert ann.OVERSUBSCRIPTION not in big  # the deprecated copy went with the first write
    assert big[ann.PUBLISHED_CPU] == "6000"  # the agent's own annotations are the agent's: untouched
    assert all(ann.OVERSUBSCRIPTION not in annotations_of(kube_api, n) for n in hosts)

    def seen_written() -> bool:
        load = c.board.load("big")
        return load is not None and bool(load.metrics)

    wait_for(seen_written, what="the node informer shows the first write")
    scores = {h["Host"]: h["Score"] for h in c.extender.prioritize(OFFLINE_POD, None, hosts)}
    # 50 × cpu/max_cpu + 50 × memory/max_memory, scaled to 0..10: big 10, small 2.5 (rounded) -> 3
    assert scores == {"big": 10, "small": 3, "liar": 0}
    # The agent publishes a new value: the extender follows the node informer, not the next poll.
    kube.patch_node_annotations("small", published(6000, 8 << 30))
    wait_for(lambda: c.extender.prioritize(OFFLINE_POD, None, ["small"])[0]["Score"] == 10, what="the new value")


def test_the_deprecated_copy_is_kept_on_request(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
    caplog: pytest.LogCaptureFixture,
) -> None:
    add_node(kube_api, "n1", fleet.add("n1", agent_payload("n1", 0.3, oversubscription=(1500, 1 << 30))))
    c = Controller(kube, config(legacy_oversubscription_annotation=True), default_policy(), clock=Clock(T0))
    started.append(c)
    assert "legacy_oversubscription_annotation is deprecated" in caplog.text
    c.start(run_loop=False)
    wait_for(c.synced, what="informers")
    run_cycle(c)
    assert annotations_of(kube_api, "n1")[ann.OVERSUBSCRIPTION] == "1500,1073741824,2026-11-22T10:00:00Z"
