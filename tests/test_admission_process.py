"""`colo-controller --admission FILE` as a process: the webhook beside the extender, its counters on the
controller's /metrics, a clean exit on SIGTERM, and a missing certificate stopping start-up with a reason."""

from __future__ import annotations

import json
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.test_admission_server import PROFILE, free_port, make_cert
from testsupport.admission_reviews import pod, review
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.waiting import wait_for

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl (to make test certificates) missing")

COLO_CONTROLLER = str(Path(sys.executable).with_name("colo-controller"))


def write_files(tmp_path: Path, api: FakeKubeAPI, cert: Path, key: Path) -> tuple[list[str], int, int]:
    http_port, https_port = free_port(), free_port()
    config = {"listen": f"127.0.0.1:{http_port}", "leader_election": {"enabled": False}, "log_level": "info"}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    admission = {"listen": f"127.0.0.1:{https_port}", "cert_file": str(cert), "key_file": str(key),
                 "profiles": [PROFILE]}  # fmt: skip
    (tmp_path / "admission.yaml").write_text(yaml.safe_dump(admission), encoding="utf-8")
    args = [COLO_CONTROLLER, "--config", str(tmp_path / "config.yaml"), "--admission",
            str(tmp_path / "admission.yaml"), "--kubeconfig", api.kubeconfig(tmp_path / "kubeconfig")]  # fmt: skip
    return args, http_port, https_port


@pytest.fixture
def controller(kube_api: FakeKubeAPI, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, int, Path]]:
    kube_api.put("namespaces", {"metadata": {"name": "spark", "labels": {"colo.io/colocation": "batch"}}})
    kube_api.put("priorityclasses", {"metadata": {"name": "koord-batch"}, "value": 5999})
    cert, key = make_cert(tmp_path / "tls", "colo")
    args, http_port, https_port = write_files(tmp_path, kube_api, cert, key)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc, http_port, https_port, cert
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_the_controller_serves_the_webhook_and_counts_its_answers(
    controller: tuple[subprocess.Popen[str], int, int, Path],
) -> None:
    proc, http_port, https_port, cert = controller
    tls = ssl.create_default_context(cafile=str(cert))
    doc = review(pod(labels={"spark-role": "executor"}))

    def answer() -> dict[str, object] | None:
        try:
            with httpx.Client(verify=tls, timeout=2) as c:
                resp = c.post(f"https://127.0.0.1:{https_port}/mutate", content=json.dumps(doc).encode())
        except httpx.HTTPError:
            return None
        out: dict[str, object] = resp.json()["response"]
        return out if "patch" in out else None  # "error" until the informers have synced

    assert wait_for(answer, timeout=30)
    metrics = httpx.get(f"http://127.0.0.1:{http_port}/metrics", timeout=5).text
    assert 'colo_controller_admission_patched_total{profile="spark-batch"}' in metrics
    proc.send_signal(signal.SIGTERM)
    # uvicorn re-raises SIGTERM once it has shut down (-15) until the controller handles signals itself
    assert proc.wait(20) in (0, -signal.SIGTERM)
    out = proc.stdout.read() if proc.stdout is not None else ""
    assert "admission webhook on https://" in out


def test_a_missing_certificate_stops_start_up_with_a_reason(kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    args, _, _ = write_files(tmp_path, kube_api, tmp_path / "missing.crt", tmp_path / "missing.key")
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "admission webhook: certificate" in done.stderr and "Traceback" not in done.stderr
