"""What `colo-agent` loads: its web stack and the Kubernetes client, without the libraries they would
import for paths the agent never takes (a long-lived process keeps every module it imported)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Loaded by a library's `__init__` or top for what the agent does not do (and what replaced it).
NEVER = (
    "fastapi",  # the app is Starlette's; FastAPI only with serving.api_docs
    "opentelemetry",  # through fastapi
    "click",  # uvicorn's command line (serving.uvicorn_package)
    "uvicorn.main",
    "uvicorn.supervisors",
    "requests_oauthlib",  # an oidc kubeconfig user only (kube.lean)
    "oauthlib",
    "dateutil.parser",  # deserialising into models only (kube.lean)
    "kubernetes.client.api",  # the generated API classes
    "kubernetes.watch",
)

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_the_agent_in_a_cluster_loads_only_what_it_uses(tmp_path: Path) -> None:
    """main() up to binding its socket (taken here, so it stops there with exit code 2): by then it has
    imported the web stack and connected the client."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["--kubeconfig", str(kubeconfig), "--node-name", "n1", "--listen", f"127.0.0.1:{port}",
                "--state-file", ""]  # fmt: skip
        code = (
            "import json, sys\n"
            "from colo_agent.main import main\n"
            f"status = main({argv!r})\n"
            "print(json.dumps([status, 'exporter.app' in sys.modules, 'kube.client' in sys.modules, sorted(sys.modules)]))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            check=True,
            env={**os.environ, "XDG_STATE_HOME": str(tmp_path), "COLO_ENFORCEMENT__LEDGER_FILE": ""},
        )  # nothing it might save lands outside tmp_path
    status, web, kube, modules = json.loads(out.stdout.splitlines()[-1])
    assert (status, web, kube) == (2, True, True), out.stderr
    loaded = [m for m in modules if any(m == n or m.startswith(f"{n}.") for n in NEVER)]
    assert loaded == []
