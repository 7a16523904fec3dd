"""The agent's DaemonSet starts on any conformant node (issue 22), checked on what `kubectl kustomize` renders:
no AppArmor profile in the base (a component adds it), no hostPath of /proc nor any `type: File` host file a
node may lack, kubelet's files per distribution from components, node settings as environment variables the
agent's own config loader reads, and no surge pod for a workload on a host port."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import load_config
from cgroup.driver import DEFAULT_KUBELET_CONFIGS

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
COMPONENTS = DEPLOY / "components"
#: kubelet's config file on each distribution a component is shipped for (docs/deploy-nodes.md cites them).
KUBELET_CONFIGS = {
    "kubeadm": "/var/lib/kubelet/config.yaml",
    "k3s": "/var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf",
    "eks": "/etc/kubernetes/kubelet/config.json",
    "gke": "/home/kubernetes/kubelet-config.yaml",
    "aks": "/etc/default/kubeletconfig.json",
}

Obj = dict[str, Any]

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl (its built-in kustomize)")


def render(folder: Path) -> list[Obj]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d is not None]


def overlay(tmp_path: Path, components: Sequence[str] = (), **extra: Any) -> list[Obj]:
    """An overlay of the base with `components` (names under deploy/components) and `extra` kustomization keys."""
    folder = tmp_path / "overlay"
    folder.mkdir(exist_ok=True)
    rel = os.path.relpath(DEPLOY, folder)
    doc: Obj = {"resources": [f"{rel}/daemonset"], "components": [f"{rel}/components/{c}" for c in components]}
    doc.update(extra)
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    return render(folder)


def find(objs: list[Obj], kind: str, name: str) -> Obj:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def agent(objs: list[Obj]) -> tuple[Obj, Obj]:
    """(pod spec, agent container) of the rendered DaemonSet."""
    spec = find(objs, "DaemonSet", "colo-agent")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return spec, container


def walk(obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k, v
            yield from walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk(v)


def host_paths(objs: list[Obj]) -> list[Obj]:
    return [v["hostPath"] for o in objs for k, vs in walk(o) if k == "volumes" for v in vs if "hostPath" in v]


def test_the_base_asks_for_no_apparmor_profile_and_the_component_adds_it(tmp_path: Path) -> None:
    base = render(DEPLOY / "daemonset")
    assert not [v for o in base for k, v in walk(o) if k in ("appArmorProfile", "apparmor.security.beta.kubernetes.io")]
    assert not [k for o in base for k in (o["metadata"].get("annotations") or {}) if "apparmor" in k]
    _, c = agent(overlay(tmp_path, ["apparmor"]))
    assert c["securityContext"]["appArmorProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}  # the rest is kept


def test_the_base_needs_no_host_file_a_node_may_lack() -> None:
    base = render(DEPLOY / "daemonset")
    paths = host_paths(base)
    assert paths, "the agent mounts host directories"
    assert not [p for p in paths if p["path"] == "/proc" or p["path"].startswith("/proc/")], "no hostPath of /proc"
    assert not [p for p in paths if p.get("type") == "File"], "a missing file keeps the pod from starting"
    assert {p.get("type") for p in paths} <= {"Directory", "DirectoryOrCreate"}
    spec, c = agent(base)
    # /host/proc is the image's link to the container's /proc: the host's processes with hostPID, and the
    # runtime's read-only /proc/sys and /proc/sysrq-trigger (where the kernel has them) in an unprivileged container
    assert spec["hostPID"] is True and c["securityContext"]["privileged"] is False
    assert "RUN mkdir /host && ln -s /proc /host/proc" in (DEPLOY / "Dockerfile").read_text(encoding="utf-8")


@pytest.mark.parametrize("distribution", sorted(KUBELET_CONFIGS))
def test_each_distribution_component_mounts_kubelet_files_where_the_agent_reads_them(
    tmp_path: Path, distribution: str
) -> None:
    objs = overlay(tmp_path, [f"kubelet-{distribution}"])
    spec, c = agent(objs)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in c["env"]}
    cfg = load_config(["--config", str(agent_config(objs, tmp_path))], env=dict(env))
    assert volumes["host-kubelet-config"]["hostPath"] == {"path": KUBELET_CONFIGS[distribution], "type": "File"}
    assert mounts["host-kubelet-config"] == {
        "name": "host-kubelet-config", "mountPath": cfg.host_root + DEFAULT_KUBELET_CONFIGS[0], "readOnly": True,
    }  # fmt: skip
    assert volumes["host-cpu-manager-state"]["hostPath"]["path"] == "/var/lib/kubelet/cpu_manager_state"
    assert mounts["host-cpu-manager-state"]["mountPath"] == cfg.host_root + cfg.enforcement.cpu_manager_state
    assert mounts["host-cpu-manager-state"]["readOnly"] is True
    assert (COMPONENTS / f"kubelet-{distribution}" / "kustomization.yaml").is_file()


def agent_config(objs: list[Obj], tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(find(objs, "ConfigMap", "colo-agent")["data"]["config.yaml"], encoding="utf-8")
    return path


def test_an_overlay_sets_the_node_settings_by_patching_one_env_value(tmp_path: Path) -> None:
    base = render(DEPLOY / "daemonset")
    _, c = agent(base)
    env = {e["name"]: e.get("value") for e in c["env"]}
    cfg = load_config(["--config", str(agent_config(base, tmp_path))], env=env)
    assert cfg.cgroup_root == "/" and cfg.cgroup_driver is None  # the defaults: detection
    assert cfg.enforcement.cpu_manager_state == "/var/lib/kubelet/cpu_manager_state"

    patch = {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "colo-agent", "namespace": "colo-system"},
        "spec": {"template": {"spec": {"containers": [{"name": "agent", "env": [
            {"name": "COLO_CGROUP_ROOT", "value": "/custom-root"},
            {"name": "COLO_CGROUP_DRIVER", "value": "systemd"},
            {"name": "COLO_ENFORCEMENT__CPU_MANAGER_STATE", "value": "/data/kubelet/cpu_manager_state"},
        ]}]}}},
    }  # fmt: skip
    objs = overlay(tmp_path, patches=[{"patch": yaml.safe_dump(patch)}])
    _, c = agent(objs)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NODE_NAME"] is None and env["MALLOC_ARENA_MAX"] == "2"  # the other variables are kept
    cfg = load_config(["--config", str(agent_config(objs, tmp_path))], env=env)
    assert cfg.cgroup_root == "/custom-root" and cfg.cgroup_driver == "systemd"
    assert cfg.enforcement.cpu_manager_state == "/data/kubelet/cpu_manager_state"
    assert find(objs, "ConfigMap", "colo-agent") == find(base, "ConfigMap", "colo-agent"), "no YAML string rewritten"


def surge(workload: Obj) -> object:
    strategy = workload["spec"].get("strategy") or workload["spec"].get("updateStrategy") or {}
    return (strategy.get("rollingUpdate") or {}).get("maxSurge", 0 if workload["kind"] == "DaemonSet" else "25%")


def on_host_port(workload: Obj) -> bool:
    spec = workload["spec"]["template"]["spec"]
    ports = [p for c in spec["containers"] for p in c.get("ports") or []]
    return bool(spec.get("hostNetwork")) or any("hostPort" in p for p in ports)


def test_no_surge_pod_for_a_workload_that_may_hold_a_host_port(tmp_path: Path) -> None:
    """A surge pod needs the host port the old pod still holds: the rollout waits forever."""
    base = render(DEPLOY / "daemonset")
    workloads = [o for o in base if o["kind"] in ("DaemonSet", "Deployment")]
    assert {o["metadata"]["name"] for o in workloads} == {"colo-agent", "colo-controller"}
    for w in workloads:
        assert surge(w) == 0, w["metadata"]["name"]
    assert on_host_port(find(base, "DaemonSet", "colo-agent"))
    controller = find(base, "Deployment", "colo-controller")
    assert controller["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 1 < controller["spec"]["replicas"]
    # an overlay that puts the controller on the host network (the case) still rolls out
    patch = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "colo-controller", "namespace": "colo-system"},
             "spec": {"template": {"spec": {"hostNetwork": True}}}}  # fmt: skip
    hosted = find(overlay(tmp_path, patches=[{"patch": yaml.safe_dump(patch)}]), "Deployment", "colo-controller")
    assert on_host_port(hosted) and surge(hosted) == 0


def test_the_network_qos_component_switches_it_on_with_the_capabilities_it_needs(tmp_path: Path) -> None:
    _, base = agent(render(DEPLOY / "daemonset"))
    objs = overlay(tmp_path, ["network-qos"])
    _, c = agent(objs)
    added = set(c["securityContext"]["capabilities"]["add"])
    assert added == set(base["securityContext"]["capabilities"]["add"]) | {"SYS_ADMIN", "SYS_PTRACE", "NET_ADMIN"}
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NODE_NAME"] is None, "the base's variables are kept"
    cfg = load_config(["--config", str(agent_config(objs, tmp_path))], env=env)
    assert cfg.network_qos.enabled and "pod_network" in cfg.collectors.enabled()
    base_cfg = load_config(["--config", str(agent_config(objs, tmp_path))], env={"NODE_NAME": "n"})
    assert not base_cfg.network_qos.enabled, "off without the component"


@pytest.mark.parametrize("component", ["apparmor", "network-qos", *(f"kubelet-{d}" for d in sorted(KUBELET_CONFIGS))])
def test_every_component_renders_to_valid_workloads(tmp_path: Path, component: str) -> None:
    import kubernetes_validate  # type: ignore[import-untyped]

    for obj in overlay(tmp_path, [component]):
        if obj["kind"] in ("DaemonSet", "Deployment"):
            kubernetes_validate.validate(obj, "1.37", strict=True)
