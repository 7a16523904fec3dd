"""The webhook as kube-apiserver meets it: HTTPS with a certificate from files (reloaded when they change),
namespaces and PriorityClasses from informers on the fake API server, metrics on the controller's registry."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonpatch  # type: ignore[import-untyped]
import pytest

from controller.admission.server import AdmissionWebhook
from controller.admission.settings import AdmissionSettings
from controller.metrics import ControllerMetrics
from kube import Kube
from serving.tls import CertReloader
from testsupport import certs
from testsupport.admission_reviews import pod, review
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.waiting import wait_for

pytestmark = pytest.mark.skipif(not certs.have_openssl(), reason="openssl (to make test certificates) missing")


def make_cert(directory: Path, cn: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1/localhost, written as the Secret volume's tls.crt/tls.key."""
    return certs.make_cert(directory, "tls", san="IP:127.0.0.1,DNS:localhost", cn=cn)


def swap_in(live: Path, new: Path) -> None:
    """Replace the live files the way kubelet updates a Secret volume: new files, then one rename."""
    for name in ("tls.crt", "tls.key"):
        tmp = live / f".{name}.new"
        shutil.copyfile(new / name, tmp)
        os.replace(tmp, live / name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def served_cert(port: int, ca: Path, name: str = "127.0.0.1") -> bytes:
    """The certificate a handshake gets; a DNS `name` is sent as SNI (as kube-apiserver does), an IP is not."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=name) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der_of(crt: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(crt.read_text(encoding="ascii"))


PROFILE = {
    "name": "spark-batch",
    "namespaceSelector": {"matchLabels": {"colo.io/colocation": "batch"}},
    "qos_level": "BE",
    "priority_class_name": "koord-batch",
    "batch_resources": True,
}


@pytest.fixture
def webhook(kube: Kube, kube_api: FakeKubeAPI, tmp_path: Path) -> Iterator[AdmissionWebhook]:
    kube_api.put("namespaces", {"metadata": {"name": "spark", "labels": {"colo.io/colocation": "batch"}}})
    kube_api.put("priorityclasses", {"metadata": {"name": "koord-batch"}, "value": 5999, "globalDefault": False})
    crt, key = make_cert(tmp_path / "live", "colo-a")
    settings = AdmissionSettings.model_validate(
        {"listen": f"127.0.0.1:{free_port()}", "cert_file": str(crt), "key_file": str(key), "profiles": [PROFILE]}
    )
    hook = AdmissionWebhook(kube, settings, ControllerMetrics())
    hook.start()
    try:
        wait_for(
            lambda: hook.server.started and hook.namespaces.synced.is_set() and hook.priority_classes.synced.is_set()
        )
        yield hook
    finally:
        hook.stop()


def post(hook: AdmissionWebhook, content: bytes) -> httpx.Response:
    port = int(hook.settings.listen.rsplit(":", 1)[1])
    with httpx.Client(verify=ssl.create_default_context(cafile=hook.settings.cert_file), timeout=5) as client:
        return client.post(f"https://127.0.0.1:{port}/mutate", content=content,
                           headers={"Content-Type": "application/json"})  # fmt: skip


def test_a_review_over_https_is_answered_with_the_patch(webhook: AdmissionWebhook) -> None:
    obj = pod(containers=None)
    doc = review(obj)
    resp = post(webhook, json.dumps(doc).encode())
    assert resp.status_code == 200
    answer = resp.json()["response"]
    assert answer["uid"] == doc["request"]["uid"] and answer["allowed"] is True
    out = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(answer["patch"])))
    assert out["spec"]["priority"] == 5999 and out["metadata"]["annotations"] == {"volcano.sh/qos-level": "BE"}
    assert out["spec"]["containers"][0]["resources"]["requests"] == {
        "kubernetes.io/batch-cpu": "1500",
        "kubernetes.io/batch-memory": str(3 << 30),
    }
    samples = webhook.metrics.reviews.collect()[0].samples
    counts = {(s.labels["outcome"], s.labels["dry_run"]): s.value for s in samples if s.name.endswith("_total")}
    assert counts[("patched", "false")] == 1 and sum(counts.values()) == 1
    doc["request"]["dryRun"] = True
    dry = post(webhook, json.dumps(doc).encode()).json()["response"]
    assert dry["patch"] == answer["patch"], "a server-side dry run shows what would happen"
    samples = webhook.metrics.reviews.collect()[0].samples
    counts = {(s.labels["outcome"], s.labels["dry_run"]): s.value for s in samples if s.name.endswith("_total")}
    assert counts[("patched", "true")] == 1
    assert webhook.metrics.patched.labels("spark-batch")._value.get() == 1, "dry runs are not counted as changes"


def test_namespace_labels_follow_the_informer(webhook: AdmissionWebhook, kube_api: FakeKubeAPI) -> None:
    doc = review(pod())
    assert "patch" in post(webhook, json.dumps(doc).encode()).json()["response"]
    kube_api.put("namespaces", {"metadata": {"name": "spark", "labels": {"colo.io/colocation": "none"}}})
    wait_for(lambda: webhook.namespace_labels("spark") == {"colo.io/colocation": "none"})
    assert "patch" not in post(webhook, json.dumps(review(pod())).encode()).json()["response"]


def test_not_a_review_is_a_400_and_counted(webhook: AdmissionWebhook) -> None:
    resp = post(webhook, b"{}")
    assert resp.status_code == 400 and "AdmissionReview" in resp.json()["error"]
    assert webhook.metrics.bad_requests._value.get() == 1


def test_a_renewed_certificate_is_served_without_a_restart(webhook: AdmissionWebhook, tmp_path: Path) -> None:
    live = Path(webhook.settings.cert_file).parent
    first = der_of(live / "tls.crt")
    assert served_cert(int(webhook.settings.listen.rsplit(":", 1)[1]), live / "tls.crt") == first
    make_cert(tmp_path / "renewed", "colo-b")
    swap_in(live, tmp_path / "renewed")
    second = der_of(live / "tls.crt")
    webhook.tls.check()  # what its watcher thread does every interval
    assert second != first
    port = int(webhook.settings.listen.rsplit(":", 1)[1])
    assert served_cert(port, live / "tls.crt") == second
    assert served_cert(port, live / "tls.crt", "localhost") == second
    assert webhook.tls.reloads == 2  # the load at start, and the renewal
    assert post(webhook, b"{}").status_code == 400  # and the server still answers


def test_a_broken_certificate_keeps_the_previous_one(tmp_path: Path) -> None:
    crt, key = make_cert(tmp_path / "live", "colo-a")
    tls = CertReloader(str(crt), str(key))
    crt.write_text("not a certificate", encoding="ascii")
    tls.check()
    assert tls.reloads == 1
    make_cert(tmp_path / "live", "colo-b")
    tls.check()
    assert tls.reloads == 2


def test_missing_certificate_files_fail_at_start(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        CertReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
