"""The webhook's HTTPS server: POST /mutate, on its own port and thread, beside the controller's HTTP server.

Namespace labels and PriorityClasses come from informers (list + watch through kube/), not from the
AdmissionReview: the API server sends the pod, never its namespace's labels, and a profile's namespace
selector needs them. Until an informer has synced, a pod whose profile needs it is left unchanged (counted
as an error), which is what `failurePolicy: Ignore` would do anyway.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from common.listen import split_host_port
from controller.admission.convert import PriorityClassInfo
from controller.admission.metrics import AdmissionMetrics
from controller.admission.review import BadReview, Reviewer
from controller.admission.settings import AdmissionSettings
from controller.metrics import ControllerMetrics
from kube import Informer, Kube
from serving.tls import CertReloader

log = logging.getLogger(__name__)


def slim_namespace(ns: dict[str, Any]) -> dict[str, Any]:
    """What the namespace informer keeps: name, resourceVersion and labels."""
    meta = ns.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "resourceVersion", "labels") if k in meta}
    return {"metadata": keep}


def slim_priority_class(pc: dict[str, Any]) -> dict[str, Any]:
    """What the PriorityClass informer keeps: name, resourceVersion, value and preemption policy."""
    meta = pc.get("metadata") or {}
    out: dict[str, Any] = {"metadata": {k: meta[k] for k in ("name", "resourceVersion") if k in meta}}
    for k in ("value", "preemptionPolicy"):
        if k in pc:
            out[k] = pc[k]
    return out


def create_webhook_app(reviewer: Reviewer, metrics: AdmissionMetrics, max_body_bytes: int) -> FastAPI:
    """POST /mutate answers AdmissionReviews; a body that is not one gets 400 (the API server then
    applies the failure policy, Ignore)."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body_bytes:
                metrics.bad_requests.inc()
                return JSONResponse({"error": f"body larger than {max_body_bytes} bytes"}, status_code=413)
        started = time.perf_counter()
        try:
            answer, decision = reviewer.review(body)
        except BadReview as err:
            metrics.bad_requests.inc()
            return JSONResponse({"error": str(err)}, status_code=400)
        metrics.record(decision, time.perf_counter() - started)
        if decision.outcome in ("patched", "error"):
            log.log(
                logging.INFO if decision.outcome == "patched" else logging.WARNING,
                "admission: %s review %s (%s)%s",
                decision.outcome,
                answer["response"]["uid"],
                decision.reason,
                " [dry run]" if decision.dry_run else "",
            )
        return JSONResponse(answer)

    return app


class AdmissionWebhook:
    """Informers, reviewer and HTTPS server of the webhook; start() and stop() from the main thread."""

    def __init__(self, kube: Kube, settings: AdmissionSettings, metrics: ControllerMetrics) -> None:
        self.settings = settings
        self.metrics = AdmissionMetrics(metrics.registry)
        self.namespaces = Informer(kube, "namespaces", transform=slim_namespace)
        self.priority_classes = Informer(kube, "priorityclasses", transform=slim_priority_class)
        self.reviewer = Reviewer(settings, self.namespace_labels, self.priority_class)
        self.tls = CertReloader(settings.cert_file, settings.key_file)  # serving/: the programs' one reloader
        host, port = split_host_port(settings.listen)
        config = uvicorn.Config(
            create_webhook_app(self.reviewer, self.metrics, settings.max_body_bytes),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
        config.load()
        config.ssl = self.tls.context  # reloaded in place: new handshakes get a renewed certificate
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self.started = False

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        ns = self.namespaces.get(name)
        if ns is None:
            return None
        labels = (ns.get("metadata") or {}).get("labels") or {}
        return labels if isinstance(labels, Mapping) else {}

    def priority_class(self, name: str) -> PriorityClassInfo | None:
        pc = self.priority_classes.get(name)
        if pc is None or not isinstance(pc.get("value"), int):
            return None
        policy = pc.get("preemptionPolicy")
        return PriorityClassInfo(pc["value"], policy if isinstance(policy, str) else None)

    def start(self) -> None:
        self.started = True
        self.namespaces.start()
        self.priority_classes.start()
        self.tls.start()
        self._thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), name="colo-webhook")
        self._thread.daemon = True
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self.tls.stop()
        self.namespaces.stop(timeout)
        self.priority_classes.stop(timeout)
