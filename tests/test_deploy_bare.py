"""A bare `kubectl apply -k deploy/daemonset` starts: the kustomization rendered by kubectl's own kustomize,
every Secret a pod mounts is optional or created by the base (the programs serve a self-signed certificate
until the Secrets exist, tests/test_selfsigned_serving.py), the image is the kustomization's one `images:`
entry, and each container's own command and arguments accept the rendered configuration (`--check`), read
from its mounts as the pod would see them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "deploy" / "daemonset"
BIN = Path(sys.executable).parent
Obj = dict[str, Any]

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (its kustomize renders the base)")


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(BASE)], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def workloads(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if o["kind"] in ("DaemonSet", "Deployment")]


def secret_names(volume: Obj) -> list[tuple[str, bool]]:
    """(Secret name, optional) of every Secret a volume reads, projected sources included."""
    found = []
    if "secret" in volume:
        found.append((volume["secret"]["secretName"], bool(volume["secret"].get("optional"))))
    for source in volume.get("projected", {}).get("sources", []):
        if "secret" in source:
            found.append((source["secret"]["name"], bool(source["secret"].get("optional"))))
    return found


def test_the_base_has_both_workloads(rendered: list[Obj]) -> None:
    assert sorted(o["metadata"]["name"] for o in workloads(rendered)) == ["colo-agent", "colo-controller"]


def test_every_secret_a_pod_mounts_is_optional_or_created_by_the_base(rendered: list[Obj]) -> None:
    created = {o["metadata"]["name"] for o in rendered if o["kind"] == "Secret"}
    mounted = 0
    for workload in workloads(rendered):
        for volume in workload["spec"]["template"]["spec"].get("volumes", []):
            for name, optional in secret_names(volume):
                mounted += 1
                assert optional or name in created, f"{workload['metadata']['name']}: Secret {name} is required"
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                assert ref is None or ref.get("optional") or ref["name"] in created, env
    assert mounted >= 3, "the check saw the TLS Secrets"


def test_the_image_is_the_kustomizations_one_variable(rendered: list[Obj]) -> None:
    kust = yaml.safe_load((BASE / "kustomization.yaml").read_text(encoding="utf-8"))
    (entry,) = kust["images"]
    image = f"{entry['newName']}:{entry['newTag']}"
    for workload in workloads(rendered):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert container["image"] == image


def pod_files(workload: Obj, container: Obj, objs: list[Obj], root: Path) -> dict[str, Path]:
    """Write the ConfigMap files `container` sees under `root` + its mount paths; {mount path: where}."""
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
    configmaps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        sources = (
            [{"configMap": volume["configMap"]}]
            if "configMap" in volume
            else volume.get("projected", {}).get("sources", [])
        )
        if "secret" in volume or any("secret" in s for s in sources):
            mounts[mount["mountPath"]] = root / mount["mountPath"].lstrip("/")  # optional: empty until it exists
            continue
        for source in sources:
            if "configMap" not in source:
                continue
            data = configmaps[source["configMap"]["name"]]["data"]
            items = source["configMap"].get("items") or [{"key": k, "path": k} for k in data]
            target = root / mount["mountPath"].lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            for item in items:
                (target / item["path"]).write_text(data[item["key"]], encoding="utf-8")
            mounts[mount["mountPath"]] = target
    return mounts


def relocate(text: str, mounts: dict[str, Path]) -> str:
    """`text` with every mount path replaced by where its files are here (one pass, longest first)."""
    if not mounts:
        return text
    pattern = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
    return re.sub(rf"(?<![\w./-])({pattern})(?=/|\b|$)", lambda m: str(mounts[m[1]]), text)


@pytest.mark.parametrize("name", ["colo-agent", "colo-controller"])
def test_the_pods_command_accepts_the_rendered_configuration(name: str, rendered: list[Obj], tmp_path: Path) -> None:
    (workload,) = [o for o in workloads(rendered) if o["metadata"]["name"] == name]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    mounts = pod_files(workload, container, rendered, tmp_path / "pod")
    for written in (tmp_path / "pod").rglob("*"):
        if written.is_file():
            written.write_text(relocate(written.read_text(encoding="utf-8"), mounts), encoding="utf-8")
    command = [relocate(arg, mounts) for arg in [*container["command"], *container.get("args", [])]]
    env = {
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "NODE_NAME": "node-a",  # the downward API's fieldRef
    }
    env.update({e["name"]: relocate(e["value"], mounts) for e in container.get("env", []) if "value" in e})
    result = subprocess.run([*command, "--check"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.lstrip().startswith("{"), result.stdout[:200]
    assert "Traceback" not in result.stderr
