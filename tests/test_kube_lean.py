"""kube/lean.py: the official client's packages without their `__init__` files until a name needs them.

Each case runs in a fresh interpreter: the lean packages are installed once per process, at `import kube`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, cwd=ROOT
    )
    return out.stdout.strip()


def test_kube_loads_neither_models_nor_apis() -> None:
    code = (
        "import sys\n"
        "import kube\n"
        "from kube.lean import kube_config\n"
        "kube_config()\n"
        "loaded = [m for m in sys.modules if m.startswith(('kubernetes.client.models.', 'kubernetes.client.api.'))]\n"
        "deferred = ('requests_oauthlib', 'oauthlib', 'dateutil.parser', 'kubernetes.watch', 'kubernetes.dynamic')\n"
        "loaded += [m for m in deferred if m in sys.modules]\n"
        "loaded += [m for m in ('kubernetes.client',) if '_colo_full' in vars(sys.modules[m])]  # no real __init__\n"
        "print(loaded)\n"
    )
    assert run(code) == "[]"


def test_every_name_of_a_lean_package_resolves_on_first_use() -> None:
    """Names that only the real `__init__` provides, lazily (kubernetes>=37), work on their first access."""
    code = (
        "import kube\n"
        "import kubernetes.client\n"
        "import kubernetes.client.models as models\n"
        "from kubernetes.client.api.core_v1_api import CoreV1Api\n"
        "from kubernetes.client.api_client import ApiClient\n"
        "from kubernetes.client.models.v1_pod import V1Pod\n"
        "assert models.V1Pod is V1Pod\n"
        "assert kubernetes.client.CoreV1Api is CoreV1Api and kubernetes.client.ApiClient is ApiClient\n"
        "assert kubernetes.client.V1Pod is V1Pod\n"
        "try:\n"
        "    models.NoSuchModel\n"
        "except AttributeError as err:\n"
        "    print('AttributeError', 'NoSuchModel' in str(err))\n"
    )
    assert run(code) == "AttributeError True"


def test_the_client_deserialises_a_model_through_the_deferred_imports() -> None:
    """The ApiClient looks its model classes up on `kubernetes.client.models` (left lean until then) and
    parses dates with python-dateutil (a stand-in until then)."""
    code = (
        "import json\n"
        "import kube\n"
        "from kubernetes.client.api_client import ApiClient\n"
        "meta = {'name': 'web', 'namespace': 'a', 'creationTimestamp': '2024-05-01T10:20:30Z'}\n"
        "pod = ApiClient().deserialize(json.dumps({'metadata': meta}), 'V1Pod', 'application/json')\n"
        "print(type(pod).__name__, pod.metadata.name, pod.metadata.creation_timestamp.isoformat())\n"
    )
    assert run(code) == "V1Pod web 2024-05-01T10:20:30+00:00"
