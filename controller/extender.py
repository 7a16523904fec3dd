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
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from common.logs import Repeats, repeated
from controller.config import ClassifySettings, ExtenderSettings
from controller.extender_args import BadRequest, parse_args
from controller.load_annotations import Oversubscription
from controller.metrics import ControllerMetrics
from controller.nodes import node_name
from controller.pod_classifier import PodClassifier
from controller.scoring import MAX_EXTENDER_PRIORITY, ScoreBoard
from serving.limits import ClientGone, Gate, Rejected, read_body
from serving.settings import ServingSettings

__all__ = ["DEFAULT_MAX_BODY_BYTES", "EXTENDER_PATHS", "BadRequest", "Extender", "create_app", "parse_args"]

log = logging.getLogger(__name__)

#: The largest real ExtenderArgs with nodeCacheCapable (the manifests' setting): 5000 node names of up to
#: 253 characters (1.3 MB as JSON) plus a Pod of up to the API server's 1.5 MiB object limit, doubled.
DEFAULT_MAX_BODY_BYTES = 8 << 20
#: kube-scheduler calls these without a bearer token (its extender client has none): never authenticated.
EXTENDER_PATHS = ("/filter", "/prioritize")


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
        settings: ExtenderSettings | None = None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.board = board
        self.classify = PodClassifier(classify_settings)
        self.clock = clock
        self.settings = settings or ExtenderSettings()
        self.metrics = metrics
        self._fail_open_logs = Repeats(period=600.0)

    def _exempt(self, pod: Mapping[str, Any]) -> str | None:
        """Why `pod` passes the load predicates whatever the load (crane: DaemonSet pods), or None."""
        if is_daemonset_pod(pod):
            return "daemonset"
        if not self.settings.filter_offline and self.classify(pod) == "offline":
            return "offline"
        return None

    def _failed_open(self, pod: Mapping[str, Any], candidates: int) -> None:
        if self.metrics is not None:
            self.metrics.extender_fail_open.inc()
        if (held := self._fail_open_logs.occurred("all")) is not None:
            meta = pod.get("metadata")
            meta = meta if isinstance(meta, Mapping) else {}
            log.warning(
                "the load predicates would filter all %d candidate nodes of pod %s/%s: none filtered "
                "(extender.fail_open)%s",
                candidates,
                str(meta.get("namespace"))[:64],
                str(meta.get("name"))[:64],
                repeated(held),
            )

    @staticmethod
    def _scale(score: int) -> int:
        """crane's 0..100 to the extender's 0..MaxExtenderPriority, rounded."""
        return (score * MAX_EXTENDER_PRIORITY + 50) // 100

    def filter(
        self, pod: Mapping[str, Any], nodes: list[dict[str, Any]] | None, names: list[str] | None
    ) -> dict[str, Any]:
        """ExtenderFilterResult: drop nodes whose fresh load is above a predicate limit (not for DaemonSet
        pods, nor offline ones unless `filter_offline`); none at all when that would drop every candidate
        and `fail_open`."""
        now = self.clock()
        failed: dict[str, str] = {}
        skip = self._exempt(pod) is not None
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
        candidates = len(nodes) if nodes is not None else len(names or ())
        if failed and self.settings.fail_open and len(failed) >= candidates:
            self._failed_open(pod, candidates)
            if nodes is not None:
                result["Nodes"]["items"] = list(nodes)
            if names is not None:
                result["NodeNames"] = list(names)
            failed = {}
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


def _filter_error(reason: str) -> dict[str, Any]:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": reason}


def create_app(
    extender: Extender,
    metrics: ControllerMetrics,
    *,
    ready: Callable[[], bool] = lambda: True,
    unhealthy: Callable[[], str | None] = lambda: None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    serving: ServingSettings | None = None,
    rebalance: Callable[[], dict[str, Any]] = lambda: {"enabled": False},
) -> FastAPI:
    """The HTTP surface: /filter, /prioritize, /healthz, /readyz, /metrics, /api/v1/scores, /api/v1/rebalance.

    /healthz (liveness) fails with `unhealthy()`'s reason, for what a restart cures (a dead thread, a
    stuck polling loop); /readyz (readiness) fails until `ready()`, i.e. while the node cache is not
    synced, which a restart would only prolong.

    Extender calls are admitted up to `serving.max_concurrent` at once (503 past that), their bodies read
    up to `max_body_bytes` within `serving.body_timeout`, then decoded, scored and encoded by one worker
    thread, never on the event loop that answers the probes.
    """
    settings = serving or ServingSettings()
    docs = settings.api_docs
    app = FastAPI(
        title="colo-controller",
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
    )
    latency = metrics.extender_latency
    gate = Gate(settings.max_concurrent, workers=1)
    app.state.gate = gate

    async def _answer(
        request: Request, verb: str, work: Callable[[bytes], object], error: Callable[[str], object]
    ) -> Response:
        start = time.perf_counter()
        try:
            gate.enter()
        except Rejected as err:
            return _json(error(err.reason), status=err.status)
        try:
            body = await read_body(request, max_body_bytes, settings.body_timeout)
            response = await gate.run(lambda: _json(work(body)))
        except (Rejected, BadRequest) as err:
            status = err.status if isinstance(err, Rejected) else 400
            response = _json(error(str(err)), status=status)
        except ClientGone:
            log.debug("%s: the client went away before its body was complete", verb)
            response = Response(status_code=400)  # nobody is left to read it
        finally:
            gate.leave()
        latency.labels(verb).observe(time.perf_counter() - start)
        return response

    @app.post("/filter")
    async def filter_(request: Request) -> Response:
        return await _answer(request, "filter", lambda body: extender.filter(*parse_args(body)), _filter_error)

    @app.post("/prioritize")
    async def prioritize(request: Request) -> Response:
        return await _answer(
            request, "prioritize", lambda body: extender.prioritize(*parse_args(body)), lambda r: {"error": r}
        )

    @app.get("/healthz")
    async def healthz() -> PlainTextResponse:
        reason = unhealthy()
        if reason is None:
            return PlainTextResponse("ok")
        return PlainTextResponse(reason, status_code=503)

    @app.get("/readyz")
    async def readyz() -> PlainTextResponse:
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
