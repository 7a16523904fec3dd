"""kube-scheduler HTTP extender (filter + prioritize), health and metrics endpoints.

Wire shapes follow k8s.io/kube-scheduler/extender/v1, whose Go structs have no json tags: the scheduler
sends `{"Pod":…, "Nodes":…, "NodeNames":…}` (Go decodes keys case-insensitively, so we accept any case)
and reads `ExtenderFilterResult` / `HostPriorityList` with the Go field names we emit. Scores are scaled
from crane's 0..100 to the extender range 0..MaxExtenderPriority (10).

Both replicas serve this from their own node informer, so the extender works on a follower. Handlers
bypass pydantic for the large node lists: prioritize over 5000 names must stay well under 50 ms.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from controller.annotations import Oversubscription
from controller.classify import PodClassifier
from controller.config import ClassifySettings
from controller.metrics import ControllerMetrics
from controller.nodes import node_name
from controller.scoring import MAX_EXTENDER_PRIORITY, ScoreBoard


class BadRequest(Exception):
    """The request body is not ExtenderArgs."""


def _field(doc: Mapping[str, Any], name: str) -> Any:
    lname = name.lower()
    for key, value in doc.items():
        if key.lower() == lname:
            return value
    return None


def parse_args(body: bytes) -> tuple[dict[str, Any], list[dict[str, Any]] | None, list[str] | None]:
    """(pod, nodes or None, node names or None) from an ExtenderArgs body."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise BadRequest(f"body is not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise BadRequest("ExtenderArgs must be a JSON object")
    pod = _field(doc, "Pod")
    if not isinstance(pod, dict):
        raise BadRequest("ExtenderArgs.Pod is missing")
    nodes_raw = _field(doc, "Nodes")
    names_raw = _field(doc, "NodeNames")
    nodes: list[dict[str, Any]] | None = None
    names: list[str] | None = None
    if nodes_raw is not None:
        items = nodes_raw.get("items") if isinstance(nodes_raw, dict) else None
        if items is None:
            items = []
        if not isinstance(items, list) or not all(isinstance(n, dict) for n in items):
            raise BadRequest("ExtenderArgs.Nodes.items must be a list of Node objects")
        nodes = items
    if names_raw is not None:
        if not isinstance(names_raw, list) or not all(isinstance(n, str) for n in names_raw):
            raise BadRequest("ExtenderArgs.NodeNames must be a list of strings")
        names = names_raw
    if nodes is None and names is None:
        raise BadRequest("ExtenderArgs has neither Nodes nor NodeNames")
    return pod, nodes, names


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    """crane's Filter lets DaemonSet pods through unconditionally."""
    meta = pod.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    return isinstance(refs, list) and any(isinstance(r, Mapping) and r.get("kind") == "DaemonSet" for r in refs)


def _json(payload: object, status: int = 200) -> Response:
    return Response(
        content=json.dumps(payload, separators=(",", ":")), status_code=status, media_type="application/json"
    )


class Extender:
    """The decisions, independent of HTTP (used by the app and directly by the benchmark)."""

    def __init__(
        self,
        board: ScoreBoard,
        classify_settings: ClassifySettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.board = board
        self.classify = PodClassifier(classify_settings)
        self.clock = clock

    @staticmethod
    def _scale(score: int) -> int:
        """crane's 0..100 to the extender's 0..MaxExtenderPriority, rounded."""
        return (score * MAX_EXTENDER_PRIORITY + 50) // 100

    def filter(
        self, pod: Mapping[str, Any], nodes: list[dict[str, Any]] | None, names: list[str] | None
    ) -> dict[str, Any]:
        """ExtenderFilterResult: drop nodes whose fresh load is above a predicate limit."""
        now = self.clock()
        failed: dict[str, str] = {}
        skip = is_daemonset_pod(pod)
        result: dict[str, Any] = {"Nodes": None, "NodeNames": None}
        if nodes is not None:
            kept = []
            for node in nodes:
                reason = None if skip else self.board.verdict_for(node, now).overloaded
                if reason is None:
                    kept.append(node)
                else:
                    failed[node_name(node) or ""] = reason
            result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": kept}
        if names is not None:
            kept_names = []
            for name in names:
                v = None if skip else self.board.verdict(name, now)
                if v is None or v.overloaded is None:
                    kept_names.append(name)
                else:
                    failed[name] = v.overloaded
            result["NodeNames"] = kept_names
        result["FailedNodes"] = failed
        result["FailedAndUnresolvableNodes"] = {}
        result["Error"] = ""
        return result

    def prioritize(
        self, pod: Mapping[str, Any], nodes: list[dict[str, Any]] | None, names: list[str] | None
    ) -> list[dict[str, Any]]:
        """HostPriorityList: crane's load score for online pods, lendable capacity for offline pods."""
        now = self.clock()
        hosts: list[str] = list(names) if names is not None else [node_name(n) or "" for n in nodes or []]
        if self.classify(pod) == "offline":
            return self._by_oversubscription(hosts, now)
        board = self.board
        scale = self._scale
        out: list[dict[str, Any]] = []
        if names is None and nodes is not None:
            for node, host in zip(nodes, hosts, strict=True):
                out.append({"Host": host, "Score": scale(board.verdict_for(node, now).score)})
            return out
        for host in hosts:
            v = board.verdict(host, now)
            out.append({"Host": host, "Score": scale(v.score) if v is not None else 0})
        return out

    def _by_oversubscription(self, hosts: list[str], now: float) -> list[dict[str, Any]]:
        """Seed 004: offline jobs prefer nodes with more oversubscribable CPU and memory (equal weight)."""
        caps: list[Oversubscription | None] = []
        for host in hosts:
            load = self.board.load(host)
            caps.append(self.board.scorer.fresh_oversubscription(load, now) if load is not None else None)
        max_cpu = max((c.cpu_millicores for c in caps if c is not None), default=0)
        max_mem = max((c.memory_bytes for c in caps if c is not None), default=0)
        out = []
        for host, cap in zip(hosts, caps, strict=True):
            score = 0.0
            if cap is not None:
                if max_cpu > 0:
                    score += 50.0 * cap.cpu_millicores / max_cpu
                if max_mem > 0:
                    score += 50.0 * cap.memory_bytes / max_mem
            out.append({"Host": host, "Score": self._scale(int(score))})
        return out


def create_app(
    extender: Extender,
    metrics: ControllerMetrics,
    *,
    ready: Callable[[], bool] = lambda: True,
    unhealthy: Callable[[], str | None] = lambda: None,
    max_body_bytes: int = 64 << 20,
    rebalance: Callable[[], dict[str, Any]] = lambda: {"enabled": False},
) -> FastAPI:
    """The HTTP surface: /filter, /prioritize, /healthz, /readyz, /metrics, /api/v1/scores, /api/v1/rebalance.

    /healthz (liveness) fails with `unhealthy()`'s reason, for what a restart cures (a dead thread, a
    stuck polling loop); /readyz (readiness) fails until `ready()`, i.e. while the node cache is not
    synced, which a restart would only prolong.
    """
    app = FastAPI(title="colo-controller", docs_url=None, redoc_url=None, openapi_url=None)
    latency = metrics.extender_latency

    async def _body(request: Request) -> bytes:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_body_bytes:
            raise BadRequest(f"body larger than {max_body_bytes} bytes")
        body = await request.body()
        if len(body) > max_body_bytes:
            raise BadRequest(f"body larger than {max_body_bytes} bytes")
        return body

    @app.post("/filter")
    async def filter_(request: Request) -> Response:
        start = time.perf_counter()
        try:
            pod, nodes, names = parse_args(await _body(request))
            payload = extender.filter(pod, nodes, names)
        except BadRequest as err:
            payload = {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}}
            payload["Error"] = str(err)
        response = _json(payload)
        latency.labels("filter").observe(time.perf_counter() - start)
        return response

    @app.post("/prioritize")
    async def prioritize(request: Request) -> Response:
        start = time.perf_counter()
        try:
            pod, nodes, names = parse_args(await _body(request))
            response = _json(extender.prioritize(pod, nodes, names))
        except BadRequest as err:
            response = _json({"error": str(err)}, status=400)
        latency.labels("prioritize").observe(time.perf_counter() - start)
        return response

    @app.get("/healthz")
    def healthz() -> PlainTextResponse:
        reason = unhealthy()
        if reason is None:
            return PlainTextResponse("ok")
        return PlainTextResponse(reason, status_code=503)

    @app.get("/readyz")
    def readyz() -> PlainTextResponse:
        if ready():
            return PlainTextResponse("ok")
        return PlainTextResponse("informers not synced", status_code=503)

    @app.get("/metrics")
    def metrics_() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/api/v1/scores")
    def scores() -> JSONResponse:
        now = extender.clock()
        out: dict[str, Any] = {}
        for name in extender.board.names():
            v = extender.board.verdict(name, now)
            if v is not None:
                out[name] = {"score": v.score, "overloaded": v.overloaded}
        return JSONResponse(out)

    @app.get("/api/v1/rebalance")
    def rebalance_plan() -> Response:
        return _json(rebalance())

    return app
