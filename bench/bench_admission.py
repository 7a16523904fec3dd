"""Benchmark: the colocation-profile webhook, which sits on the API server's pod-create path.

Run: `.venv/bin/python -m bench.bench_admission [--n 2000]`. Prints the time to decide one AdmissionReview
(parse, select among 20 profiles, convert a pod with an init container and three containers, encode the
patch) in-process, and the round trip of the same review over HTTPS on loopback with a kept-alive
connection (as kube-apiserver keeps them), through the real server (uvicorn, reloading TLS context).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import ssl
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from controller.admission.convert import PriorityClassInfo
from controller.admission.metrics import AdmissionMetrics
from controller.admission.review import Reviewer
from controller.admission.server import create_webhook_app
from controller.admission.settings import AdmissionSettings
from controller.metrics import ControllerMetrics
from serving.tls import CertReloader
from testsupport.admission_reviews import container, pod, review


def settings(cert: str = "", key: str = "", listen: str = "127.0.0.1:0") -> AdmissionSettings:
    profiles: list[dict[str, Any]] = [
        {"name": f"team-{i}", "namespaceSelector": {"matchLabels": {"team": f"t{i}"}}, "qos_level": "BE"}
        for i in range(19)
    ]
    profiles.append(
        {
            "name": "spark-batch",
            "namespaceSelector": {"matchLabels": {"colo.io/colocation": "batch"}},
            "selector": {"matchExpressions": [{"key": "spark-role", "operator": "In", "values": ["executor"]}]},
            "qos_level": "BE",
            "koordinator_qos_class": "BE",
            "priority_class_name": "koord-batch",
            "scheduler_name": "volcano",
            "batch_resources": True,
        }
    )
    return AdmissionSettings.model_validate(
        {"profiles": profiles, "cert_file": cert, "key_file": key, "listen": listen}
    )


def review_body() -> bytes:
    res = {"requests": {"cpu": "1500m", "memory": "3Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
    obj = pod(
        labels={"spark-role": "executor", "app": "spark-pi"},
        init_containers=[container("fetch", res)],
        containers=[container("executor", res), container("log", res), container("metrics", res)],
    )
    return json.dumps(review(obj)).encode()


def reviewer(s: AdmissionSettings) -> Reviewer:
    namespaces = {"spark": {"colo.io/colocation": "batch"}}
    classes = {"koord-batch": PriorityClassInfo(5999, None)}
    return Reviewer(s, namespaces.get, classes.get)


def report(name: str, samples: list[float]) -> None:
    samples.sort()
    med = statistics.median(samples) * 1e3
    p99 = samples[int(len(samples) * 0.99) - 1] * 1e3
    print(f"{name}: median {med:.3f} ms, p99 {p99:.3f} ms over {len(samples)}")


def bench_in_process(n: int) -> None:
    r, body = reviewer(settings()), review_body()
    _, decision = r.review(body)
    assert decision.outcome == "patched", decision
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        r.review(body)
        samples.append(time.perf_counter() - t)
    report("decide one review (in process)", samples)


def bench_https(n: int) -> None:
    if shutil.which("openssl") is None:
        print("https round trip: skipped (no openssl)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        crt, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(key), "-out", str(crt), "-days", "1", "-subj", "/CN=bench",
             "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        st = settings(str(crt), str(key), f"127.0.0.1:{port}")
        metrics = AdmissionMetrics(ControllerMetrics().registry)
        tls = CertReloader(st.cert_file, st.key_file)
        config = uvicorn.Config(
            create_webhook_app(reviewer(st), metrics, st.max_body_bytes),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
        )
        config.load()
        config.ssl = tls.context
        server = uvicorn.Server(config)
        thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        body = review_body()
        samples = []
        with httpx.Client(verify=ssl.create_default_context(cafile=str(crt))) as client:
            url = f"https://127.0.0.1:{port}/mutate"
            assert client.post(url, content=body).status_code == 200
            for _ in range(n):
                t = time.perf_counter()
                client.post(url, content=body)
                samples.append(time.perf_counter() - t)
        server.should_exit = True
        thread.join(5)
        report("review round trip over HTTPS (kept-alive connection)", samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args()
    bench_in_process(args.n)
    bench_https(max(100, args.n // 4))


if __name__ == "__main__":
    main()
