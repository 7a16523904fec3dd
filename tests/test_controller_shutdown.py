"""SIGTERM hands leadership over: a real colo-controller process releases its Lease before it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from kube import Kube, LeaderElector
from testsupport.kubeapi.fixtures import kube, kube_api  # noqa: F401
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE, LEASE = "colo-system", "colo-controller"
# The follower campaigns every 0.2-0.44 s; the lease itself would keep it waiting 15 s after a crash.
LEADER_SETTINGS = {"lease_duration": 15, "renew_deadline": 10, "retry_period": 0.2}


def start_controller(api: FakeKubeAPI, tmp_path: Path, identity: str) -> subprocess.Popen[str]:
    config = {
        "listen": "127.0.0.1:0",
        "agent": {"use_endpointslices": False},
        "leader_election": {"identity": identity, **LEADER_SETTINGS},
    }
    (tmp_path / "controller.yaml").write_text(yaml.safe_dump(config))
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    cmd = [
        sys.executable,
        "-m",
        "controller.main",
        "--kubeconfig",
        kubeconfig,
        "--config",
        str(tmp_path / "controller.yaml"),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def holder(client: Kube) -> str:
    lease = client.get_lease(NAMESPACE, LEASE) or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def test_sigterm_releases_the_lease_and_a_follower_takes_over_within_a_second(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    tmp_path: Path,
) -> None:
    proc = start_controller(kube_api, tmp_path, "leader-process")
    stop = threading.Event()
    follower = LeaderElector(kube, NAMESPACE, LEASE, "follower", **LEADER_SETTINGS)
    thread = threading.Thread(target=follower.run, args=(stop,), daemon=True)
    try:
        wait_for(lambda: holder(kube) == "leader-process", timeout=30)
        thread.start()
        time.sleep(1.0)  # the follower has campaigned a few times and lost each round
        assert not follower.is_leader and holder(kube) == "leader-process"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: follower.is_leader, timeout=10, step=0.005)
        handover = time.monotonic() - sent
        out, _ = proc.communicate(timeout=15)
        print(f"hand-over after SIGTERM: {handover * 1000:.0f} ms")
        assert proc.returncode == 0, out
        assert "releasing leadership" in out
        assert holder(kube) == "follower"
        # Well under the 15 s lease the follower would otherwise wait out; a generous margin for a busy machine.
        assert handover < 3.0, f"hand-over took {handover:.2f}s"
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        thread.join(5)


def test_unloadable_certificate_exits_2_with_one_line(
    kube_api: FakeKubeAPI,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from controller.main import main

    config = {
        "listen": "127.0.0.1:0",
        "leader_election": {"enabled": False},
        "serving": {"tls_cert_file": str(tmp_path / "broken.crt"), "tls_key_file": str(tmp_path / "broken.key")},
    }
    (tmp_path / "broken.crt").write_text("not a certificate")  # missing files would be served self-signed
    (tmp_path / "broken.key").write_text("not a key")
    (tmp_path / "controller.yaml").write_text(yaml.safe_dump(config))
    kubeconfig = kube_api.kubeconfig(tmp_path / "kubeconfig")
    assert main(["--kubeconfig", kubeconfig, "--config", str(tmp_path / "controller.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("colo-controller: serving:") and "broken.crt" in err and len(err.splitlines()) == 1
