"""deploy/: manifests against the Kubernetes schema, the kustomization, manifests against the code (config,
paths, ports, RBAC against the API calls the code makes), the dashboard against the metrics emitted, and the
image definition against pyproject and its lock."""

from __future__ import annotations

import ast
import copy
import inspect
import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, cast

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from prometheus_client.parser import text_string_to_metric_families

import kube.permissions as kp
from agent.capacity.owner import ANNOTATION_CPU, ANNOTATION_MEMORY, BATCH_CPU, BATCH_MEMORY, OversubscriptionOwner
from agent.config import AgentConfig, load_config
from agent.config_sections.enforcement import EnforcementConfig, EvictionConfig
from agent.config_sections.lending import OversubscriptionConfig
from agent.enforce.stage import Enforcer
from agent.enforce.strategies.cpu_suppression import CpuReport
from agent.enforce.strategies.memory_high import MemoryHighReport
from agent.evict.evictor import EVICTING_ANNOTATION, Evictor
from agent.evict.kube_actions import EVICTING_TAINT
from agent.node_state import node_state
from agent.snapshot import (
    ContainerSample,
    InterfaceSample,
    NodeSample,
    PodMeta,
    PodSample,
    Pressure,
    Snapshot,
    TierSample,
)
from agent.view import AgentView
from agent.windows.store import WindowStore
from cgroup import CgroupReader, CgroupWriter, Layout, PathModel
from cgroup.driver import DEFAULT_KUBELET_CONFIGS
from cgroup.layout import Mount
from controller.config import ControllerConfig
from controller.config import load_config as load_controller_config
from controller.main import main as controller_main
from controller.metrics import ControllerMetrics
from controller.policy import default_policy, load_policy
from exporter.encoding import encode_families
from exporter.snapshot_metrics import POD_LABELS, ColoCollector
from kube import ApiError, Kube
from kube.permissions import Permission
from kube.resources import node_allocatable
from serving.auth import User
from tests.queries import dashboard_panels, dashboard_queries, promql_metric_names

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "daemonset"
#: The Kubernetes version whose OpenAPI schema every manifest must satisfy (bundled by kubernetes-validate).
K8S_VERSION = "1.37"
#: Files of deploy/daemonset that are deliberately not in kustomization.yaml, and why.
OPTIONAL_FILES = {
    "servicemonitor.yaml": "needs prometheus-operator's CRDs",
    "prometheusrule.yaml": "needs prometheus-operator's CRDs (tests/test_alert_rules.py checks it)",
    "alerts.rules.yml": "a Prometheus rules file, not a cluster object",
    "kube-scheduler-config.yaml": "kube-scheduler's own configuration file, not a cluster object",
    "grafana-dashboard.json": "imported into Grafana",
    "agent-admission-policy.yaml": "hardening that needs Kubernetes >= 1.30 (node claim in service-account tokens)",
}
#: Optional files that are plain Kubernetes objects: validated against the schema like the base.
OPTIONAL_MANIFESTS = ("agent-admission-policy.yaml",)
#: Sub-folders of deploy/daemonset that are kustomize components (opt-in).
OPTIONAL_COMPONENTS = {"colocation-profiles"}
NAMESPACE = "colo-system"

Obj = dict[str, Any]


# ---------------------------------------------------------------------------------------------------------
# loading


def load_docs(path: Path) -> list[Obj]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert all(isinstance(d, dict) for d in docs), path
    return cast(list[Obj], docs)


def kustomization(folder: Path) -> Obj:
    docs = load_docs(folder / "kustomization.yaml")
    assert len(docs) == 1
    return docs[0]


def base_objects() -> list[Obj]:
    out: list[Obj] = []
    for name in kustomization(BASE)["resources"]:
        out += load_docs(BASE / name)
    return out


def find(objs: Iterable[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def config_text(configmap: Obj, key: str = "config.yaml") -> str:
    text = configmap["data"][key]
    assert isinstance(text, str)
    return text


def agent_configmap() -> Obj:
    return find(base_objects(), "ConfigMap", "colo-agent")


def load_agent_config(tmp_path: Path, env: Mapping[str, str] | None = None) -> AgentConfig:
    path = tmp_path / "agent.yaml"
    path.write_text(config_text(agent_configmap()), encoding="utf-8")
    return load_config(["--config", str(path)], env=dict(env or {}))


def load_controller(tmp_path: Path) -> ControllerConfig:
    objs = base_objects()
    cfg = tmp_path / "controller.yaml"
    cfg.write_text(config_text(find(objs, "ConfigMap", "colo-controller")), encoding="utf-8")
    return load_controller_config(str(cfg))


def agent_pod_spec() -> Obj:
    spec = find(base_objects(), "DaemonSet", "colo-agent")["spec"]["template"]["spec"]
    assert isinstance(spec, dict)
    return spec


def container_port(container: Obj, port: int | str) -> int:
    """A probe's or Service's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    named = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert len(named) == 1, f"no container port named {port!r}"
    return int(named[0])


def apply_json_patch(doc: Obj, ops: list[Obj]) -> Obj:
    """RFC 6902 `add`, `remove` and `test` (what the components and the agent's taint patch use), on a copy;
    a failed `test` raises ValueError."""
    out = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] in ("add", "remove", "test"), op
        *parents, last = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        target: Any = out
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if op["op"] == "test":
            current = target[int(last)] if isinstance(target, list) else target.get(last)
            if current != op["value"]:
                raise ValueError(f"test {op['path']}: {current!r} != {op['value']!r}")
        elif op["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
        elif isinstance(target, list):
            target.insert(len(target) if last == "-" else int(last), op["value"])
        else:
            target[last] = op["value"]
    return out


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, on a copy: null removes a key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge_patch(out.get(key), value)
    return out


def component_patched(component: str) -> list[Obj]:
    """The base objects a component's JSON patches change, with the patches applied (kind + name targets)."""
    comp = kustomization(BASE / component)
    objs = base_objects()
    out: dict[tuple[str, str], Obj] = {}
    for patch in comp.get("patches", []):
        target = patch["target"]
        assert set(target) <= {"group", "version", "kind", "name"}, patch
        key = (target["kind"], target["name"])
        obj = out.get(key) or find(objs, *key)
        ops = yaml.safe_load((BASE / component / patch["path"]).read_text(encoding="utf-8"))
        out[key] = apply_json_patch(obj, ops)
    return list(out.values())


def component_object(component: str, kind: str, name: str) -> Obj:
    """A base object as the component leaves it (unchanged when it does not patch it)."""
    patched = [o for o in component_patched(component) if (o["kind"], o["metadata"]["name"]) == (kind, name)]
    return patched[0] if patched else find(base_objects(), kind, name)


def component_daemonset(component: str) -> Obj:
    """The agent DaemonSet with a component's JSON patches applied."""
    return component_object(component, "DaemonSet", "colo-agent")


def component_resources(component: str) -> list[Obj]:
    """The objects a component adds."""
    return [
        d for name in kustomization(BASE / component).get("resources", []) for d in load_docs(BASE / component / name)
    ]


# ---------------------------------------------------------------------------------------------------------
# the Kubernetes schema


def schema_cases() -> Iterator[tuple[str, Obj]]:
    for name in [*kustomization(BASE)["resources"], *OPTIONAL_MANIFESTS]:
        for i, doc in enumerate(load_docs(BASE / name)):
            yield f"{name}#{i}:{doc.get('kind')}", doc
    for component in sorted(OPTIONAL_COMPONENTS):
        for name in kustomization(BASE / component).get("resources", []):
            for i, doc in enumerate(load_docs(BASE / component / name)):
                yield f"{component}/{name}#{i}:{doc.get('kind')}", doc
        for obj in component_patched(component):
            yield f"{component}: patched {obj['kind']}", obj


SCHEMA_CASES = list(schema_cases())


def validate(doc: Obj) -> None:
    """Strict: unknown fields are errors too. Raises kubernetes_validate's ValidationError."""
    used = kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert used == K8S_VERSION


def test_the_pinned_kubernetes_version_is_bundled() -> None:
    versions = kubernetes_validate.utils.all_versions()
    assert any(v.startswith(K8S_VERSION + ".") or v == K8S_VERSION for v in versions), versions


@pytest.mark.parametrize(("label", "doc"), SCHEMA_CASES, ids=[c[0] for c in SCHEMA_CASES])
def test_manifest_validates_against_the_kubernetes_schema(label: str, doc: Obj) -> None:
    validate(doc)


@pytest.mark.parametrize(
    "break_it",
    [
        lambda ds: ds["spec"]["template"]["spec"]["containers"][0].update(volumeMount=[]),  # a typo'd field
        lambda ds: ds["spec"]["template"]["spec"].update(hostPID="yes"),  # a wrong type
        lambda ds: ds["spec"].pop("selector"),  # a required field
    ],
    ids=["unknown-field", "wrong-type", "missing-required"],
)
def test_the_validator_rejects_broken_manifests(break_it: Callable[[Obj], object]) -> None:
    ds = copy.deepcopy(find(base_objects(), "DaemonSet", "colo-agent"))
    break_it(ds)
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(ds)


def test_servicemonitors_have_the_minimal_structure() -> None:
    """A prometheus-operator CRD: not in the Kubernetes OpenAPI schema, so only a structural check here."""
    objs = base_objects()
    docs = load_docs(BASE / "servicemonitor.yaml")
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert {m["metadata"]["name"] for m in monitors} == {"colo-agent", "colo-controller"}
    allowed_endpoint_keys = {
        "port", "path", "interval", "scrapeTimeout", "scheme", "relabelings", "honorLabels", "bearerTokenFile",
        "tlsConfig",
    }  # fmt: skip
    # Prometheus may `get /metrics`: the reader ClusterRole (in the base) bound to its ServiceAccount
    binding = find(docs, "ClusterRoleBinding", "colo-metrics-reader")
    validate(binding)
    reader = find(objs, "ClusterRole", binding["roleRef"]["name"])
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    for m in monitors:
        assert m["apiVersion"] == "monitoring.coreos.com/v1" and m["kind"] == "ServiceMonitor"
        assert set(m) == {"apiVersion", "kind", "metadata", "spec"}
        assert m["metadata"]["namespace"] == NAMESPACE
        spec = m["spec"]
        assert set(spec) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}
        assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        service = find(objs, "Service", m["metadata"]["name"])
        labels = service["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items(), "selects the Service"
        port_names = {p["name"] for p in service["spec"]["ports"]}
        for ep in spec["endpoints"]:
            assert set(ep) <= allowed_endpoint_keys, set(ep) - allowed_endpoint_keys
            assert ep["port"] in port_names and ep["path"] == "/metrics"
            assert re.fullmatch(r"\d+[smh]", ep["interval"])
            assert ep.get("honorLabels", False) in (True, False)
            # HTTPS with the Secret's CA, and Prometheus' own token for the agent's TokenReview
            assert ep["scheme"] == "https" and ep["bearerTokenFile"].endswith("/serviceaccount/token")
            ca = ep["tlsConfig"]["ca"]["secret"]
            assert ca["key"] == "ca.crt" and ep["tlsConfig"]["serverName"].startswith(m["metadata"]["name"] + ".")


def test_the_agent_servicemonitor_honors_the_agents_pod_labels() -> None:
    """The agent labels pod series with the measured pod's namespace/pod/container: they must beat the
    target's own labels, which prometheus-operator would otherwise keep (renaming the agent's exported_*)."""
    agent = find(load_docs(BASE / "servicemonitor.yaml"), "ServiceMonitor", "colo-agent")
    assert [ep.get("honorLabels") for ep in agent["spec"]["endpoints"]] == [True]
    # the clash is real: the agent's pod families use labels prometheus-operator sets on every target
    assert {"namespace", "pod"} <= set(POD_LABELS)


# ---------------------------------------------------------------------------------------------------------
# the kustomization


def kustomize_files(folder: Path, kust: Obj) -> list[str]:
    files = list(kust.get("resources", []))
    files += [p["path"] for p in kust.get("patches", []) if "path" in p]
    files += list(kust.get("patchesStrategicMerge", []))
    return files


def test_kustomization_lists_only_existing_files_and_every_file_is_listed_or_optional() -> None:
    kust = kustomization(BASE)
    assert kust["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and kust["kind"] == "Kustomization"
    listed = kustomize_files(BASE, kust)
    assert len(listed) == len(set(listed)), "listed twice"
    for name in listed:
        assert (BASE / name).is_file(), f"kustomization.yaml lists {name}, which does not exist"
    present = {p.name for p in BASE.iterdir() if p.is_file() and p.name != "kustomization.yaml"}
    unlisted = present - set(listed)
    assert unlisted == set(OPTIONAL_FILES), (
        f"neither listed nor deliberately optional: {unlisted - set(OPTIONAL_FILES)}"
    )
    assert not set(listed) & set(OPTIONAL_FILES)
    folders = {p.name for p in BASE.iterdir() if p.is_dir()}
    assert folders == OPTIONAL_COMPONENTS
    for component in OPTIONAL_COMPONENTS:
        comp = kustomization(BASE / component)
        assert comp["apiVersion"] == "kustomize.config.k8s.io/v1alpha1" and comp["kind"] == "Component"
        comp_files = kustomize_files(BASE / component, comp)
        for name in comp_files:
            assert (BASE / component / name).is_file(), f"{component} lists {name}, which does not exist"
        inside = {p.name for p in (BASE / component).iterdir() if p.name != "kustomization.yaml"}
        assert inside == set(comp_files), f"{component}: unused files {inside - set(comp_files)}"


def test_images_are_the_project_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert kustomization(BASE)["images"] == [{"name": "colo", "newName": "colo", "newTag": version}]
    for obj in base_objects():
        if obj["kind"] in ("DaemonSet", "Deployment"):
            for c in obj["spec"]["template"]["spec"]["containers"]:
                assert c["image"] == f"colo:{version}", c["image"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) not installed")
def test_kubectl_kustomize_builds_the_base_and_the_component(tmp_path: Path) -> None:
    def build(folder: Path) -> list[Obj]:
        out = subprocess.run(
            ["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        return [d for d in yaml.safe_load_all(out) if d is not None]

    def keys(objs: Iterable[Obj]) -> set[tuple[str, str]]:
        return {(o["kind"], o["metadata"]["name"]) for o in objs}

    built = build(BASE)
    assert keys(built) == keys(base_objects())
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = os.path.relpath(BASE, overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [rel], "components": [f"{rel}/colocation-profiles"]}), encoding="utf-8"
    )
    with_webhook = build(overlay)
    assert keys(with_webhook) - keys(built) == {
        ("ClusterRole", "colo-controller-admission"),
        ("ClusterRoleBinding", "colo-controller-admission"),
        ("ConfigMap", "colo-controller-admission"),
        ("MutatingWebhookConfiguration", "colo-colocation-profiles"),
    }
    for kind in ("Deployment", "Service"):
        built_obj = find(with_webhook, kind, "colo-controller")
        assert built_obj == component_object("colocation-profiles", kind, "colo-controller"), kind


# ---------------------------------------------------------------------------------------------------------
# configuration: what the binaries load


def test_agent_configmap_loads_and_sets_only_the_cluster_keys(tmp_path: Path) -> None:
    cfg = load_agent_config(tmp_path)
    defaults = AgentConfig().model_dump()
    changed = {k for k, v in cfg.model_dump().items() if defaults[k] != v}
    assert changed == {"listen", "host_root", "serving", "state_file"}, (
        "the ConfigMap shows the defaults; a deliberate change goes here"
    )
    assert cfg.state_file == AgentConfig().state_file_in(in_pod=True, env={}), "the pod's default, named"
    assert cfg.serving.authenticate and cfg.serving.tls and cfg.serving.open_paths == ("/api/v1/node",)
    assert cfg.listen_address(in_cluster=True) == ("0.0.0.0", 9817)
    assert cfg.host_root == "/host"
    assert load_agent_config(tmp_path, {"NODE_NAME": "node-a"}).node_name == "node-a"


def test_extended_resources_are_on_by_default_and_granted_by_the_main_role(tmp_path: Path) -> None:
    """Issue 11: the agent advertises kubernetes.io/batch-* by default, so its main role may patch node status;
    the key still switches them off (and the agent then removes them, which needs the same grant)."""
    assert load_agent_config(tmp_path).oversubscription.extended_resources is True
    off = {"COLO_OVERSUBSCRIPTION__EXTENDED_RESOURCES": "false"}
    assert load_agent_config(tmp_path, off).oversubscription.extended_resources is False
    main = grants_for(base_objects(), "colo-agent", NAMESPACE)
    assert Permission("", "nodes/status", "patch") in main.cluster
    assert kp.OPTIONAL_GRANTS == ()


def test_controller_config_and_policy_load_with_the_controllers_own_loaders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objs = base_objects()
    cfg_file, policy_file = tmp_path / "config.yaml", tmp_path / "policy.yaml"
    cfg_file.write_text(config_text(find(objs, "ConfigMap", "colo-controller")), encoding="utf-8")
    policy_file.write_text(config_text(find(objs, "ConfigMap", "colo-controller-policy"), "policy.yaml"), "utf-8")
    # the binary's own start-up validation (exit 0), with the policy where this test wrote it
    assert controller_main(["--config", str(cfg_file), "--policy", str(policy_file), "--check"]) == 0
    assert '"DynamicSchedulerPolicy"' in capsys.readouterr().out
    assert load_policy(policy_file) == default_policy(), "the shipped policy is crane's default"
    cfg = load_controller(tmp_path)
    assert cfg.leader_election.enabled
    assert cfg.agent.namespace == cfg.leader_election.namespace == NAMESPACE


def test_agent_and_controller_classify_pods_alike(tmp_path: Path) -> None:
    agent, ctl = load_agent_config(tmp_path).classify, load_controller(tmp_path).classify
    assert agent.offline_priority_classes == ctl.offline_priority_classes
    assert agent.offline_priority_below == ctl.offline_priority_below


# ---------------------------------------------------------------------------------------------------------
# the agent DaemonSet against the agent's configuration and code


@dataclass(frozen=True)
class HostPath:
    """A host path the agent uses, relative to the host's /. ``mount``: "rw" the agent writes there, "ro" it
    only reads and the mount must be read-only, "r" it reads on a mount that is writable for another path."""

    path: str
    mount: Literal["rw", "ro", "r"]
    why: str


def host_paths(cfg: AgentConfig) -> list[HostPath]:
    """Every host path the agent reads or writes under host_root (cgroup/, agent/procfs, netstats, enforcer)."""
    return [
        HostPath("proc/1/mountinfo", "r", "cgroup layout (host PID 1's mounts)"),
        HostPath("proc/stat", "r", "node CPU"),
        HostPath("proc/meminfo", "r", "node memory"),
        HostPath("proc/pressure/cpu", "r", "node PSI"),
        HostPath("proc/4242/cmdline", "r", "kubelet's command line (cgroup driver)"),
        HostPath("proc/4242/oom_score_adj", "rw", "offline processes' OOM preference"),
        HostPath("sys/fs/cgroup/kubepods.slice/cpu.max", "rw", "quotas, weights, idle, cpuset, memory.high"),
        HostPath("sys/class/net/eth0", "ro", "physical interface detection"),
        HostPath("sys/devices/pci0000:00/net/eth0/device", "ro", "/sys/class/net/* link into /sys/devices"),
        HostPath("sys/devices/pci0000:00/net/eth0/statistics/rx_bytes", "ro", "physical interfaces' counters"),
        HostPath(DEFAULT_KUBELET_CONFIGS[0].lstrip("/"), "ro", "kubelet's cgroupDriver"),
        HostPath(cfg.enforcement.cpu_manager_state.lstrip("/"), "ro", "static CPU manager's exclusive CPUs"),
    ]


def mount_for(spec: Obj, container: Obj, path: str) -> tuple[Obj, Obj]:
    """The volume mount that serves a container path (the deepest mountPath containing it) and its volume."""
    mounts = [m for m in container["volumeMounts"] if path == m["mountPath"] or path.startswith(m["mountPath"] + "/")]
    assert mounts, f"nothing is mounted at {path}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volume = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert len(volume) == 1, mount["name"]
    return mount, volume[0]


def host_source(mount: Obj, volume: Obj, container_path: str) -> str:
    assert "hostPath" in volume, f"{container_path} is served by {volume['name']}, not a hostPath"
    return str(volume["hostPath"]["path"]).rstrip("/") + container_path[len(mount["mountPath"]) :]


def test_daemonset_mounts_every_host_path_the_agent_uses(tmp_path: Path) -> None:
    cfg = load_agent_config(tmp_path)
    spec = agent_pod_spec()
    (c,) = spec["containers"]
    kubelet_files = {DEFAULT_KUBELET_CONFIGS[0].lstrip("/"), cfg.enforcement.cpu_manager_state.lstrip("/")}
    for hp in host_paths(cfg):
        inside = os.path.join(cfg.host_root, hp.path)
        if hp.path.startswith("proc/"):
            # the image's /host/proc -> /proc: the container's procfs, the host's processes with hostPID
            assert not [m for m in c["volumeMounts"] if m["mountPath"].startswith(cfg.host_root + "/proc")]
            assert (
                spec["hostPID"] is True
                and ("RUN", "mkdir /host && ln -s /proc /host/proc") in dockerfile_instructions()
            )
            continue
        if hp.path in kubelet_files:
            continue  # mounted by the distribution's component (tests/test_deploy_nodes.py)
        mount, volume = mount_for(spec, c, inside)
        assert host_source(mount, volume, inside) == "/" + hp.path, f"{inside} ({hp.why}) is not the host's"
        read_only = bool(mount.get("readOnly"))
        if hp.mount != "r":
            assert read_only == (hp.mount == "ro"), f"{inside} ({hp.why}): mounted {'ro' if read_only else 'rw'}"
    # what is deliberately not writable, although its parent is: /proc/sys and /proc/sysrq-trigger are among
    # the runtime's read-only paths of an unprivileged container with the default /proc
    assert c["securityContext"]["privileged"] is False and c["securityContext"].get("procMount", "Default") == "Default"


def test_daemonset_state_files_are_on_the_host(tmp_path: Path) -> None:
    cfg = load_agent_config(tmp_path)
    spec = agent_pod_spec()
    (c,) = spec["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    for path in (cfg.state_file, cfg.enforcement.ledger_file):
        mount, volume = mount_for(spec, c, path)
        assert not mount.get("readOnly"), path
        assert host_source(mount, volume, path) == path, "same path on the host: survives pod restarts"
        assert volume["hostPath"]["type"] == "DirectoryOrCreate"


def test_daemonset_runs_the_agent_as_configured(tmp_path: Path) -> None:
    cfg = load_agent_config(tmp_path)
    ds = find(base_objects(), "DaemonSet", "colo-agent")
    pod = ds["spec"]["template"]
    spec = pod["spec"]
    (c,) = spec["containers"]
    assert c["command"] == ["colo-agent"]
    # --config names the ConfigMap's key where it is mounted
    from agent.config import build_parser

    args = build_parser().parse_args(c["args"])
    assert args.host_root is None and args.listen is None, "host_root and listen live in the ConfigMap"
    mount, volume = mount_for(spec, c, args.config)
    assert volume["configMap"]["name"] == "colo-agent" and mount.get("readOnly") is True
    assert args.config == f"{mount['mountPath']}/config.yaml"
    # the node name from the downward API
    (node_name,) = [e for e in c["env"] if e["name"] == "NODE_NAME"]
    assert node_name["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # one port everywhere: the config's listen port
    port = cfg.listen_address(in_cluster=True)[1]
    assert [p["containerPort"] for p in c["ports"]] == [port]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    scheme = "https" if cfg.serving.tls else "http"
    for probe in ("livenessProbe", "readinessProbe"):
        assert container_port(c, c[probe]["httpGet"]["port"]) == port
        assert c[probe]["httpGet"].get("scheme", "HTTP") == scheme.upper()
    annotations = pod["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": "/metrics",
        "prometheus.io/scheme": scheme,
    }
    # the serving certificate where the config says it is
    tls_mount, tls_volume = mount_for(spec, c, cfg.serving.tls_cert_file or "")
    assert tls_volume["secret"]["secretName"] == "colo-agent-tls" and tls_mount.get("readOnly") is True
    # host namespaces, placement, priority
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["tolerations"] == [{"operator": "Exists"}], "runs on every node whatever its taints"
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["serviceAccountName"] == "colo-agent"
    # the benchmark's figures
    assert c["resources"] == {
        "requests": {"cpu": "50m", "memory": "96Mi"},
        "limits": {"cpu": "500m", "memory": "256Mi"},
    }


def test_daemonset_uses_minimal_capabilities_instead_of_privileged() -> None:
    (c,) = agent_pod_spec()["containers"]
    sc = c["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["runAsUser"] == 0, "cgroupfs files belong to root"
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sorted(sc["capabilities"]["add"]) == ["DAC_OVERRIDE", "KILL"]
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


def service_link_variables(service: Obj) -> set[str]:
    """The variables Kubernetes injects per Service into pods of its namespace unless enableServiceLinks is
    false (docker-links style: <NAME>_SERVICE_HOST, <NAME>_PORT_<port>_<PROTO> ...)."""
    name = service["metadata"]["name"].upper().replace("-", "_")
    out = {f"{name}_SERVICE_HOST", f"{name}_PORT"}
    for p in service["spec"]["ports"]:
        out.add(f"{name}_PORT_{p['port']}_{p.get('protocol', 'TCP')}")
        if "name" in p:
            out.add(f"{name}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}")
    return out


def test_no_workload_gets_service_link_variables() -> None:
    """Colo's Services' names start with colo-, so their link variables would carry the COLO_ prefix the
    agent reads configuration from: every pod template must switch service links off."""
    objs = base_objects()
    services = [o for o in objs if o["kind"] == "Service" and o["metadata"]["namespace"] == NAMESPACE]
    links = set().union(*(service_link_variables(s) for s in services))
    assert "COLO_AGENT_SERVICE_HOST" in links and all(v.startswith("COLO_") for v in links)
    workloads = [o for o in objs if o["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Job")]
    workloads += [o for c in sorted(OPTIONAL_COMPONENTS) for o in component_patched(c) if o["kind"] != "Service"]
    assert {w["metadata"]["name"] for w in workloads} == {"colo-agent", "colo-controller"}
    for w in workloads:
        assert w["spec"]["template"]["spec"].get("enableServiceLinks") is False, w["metadata"]["name"]


def test_agent_service_is_the_headless_service_the_controller_discovers(tmp_path: Path) -> None:
    cfg, ctl = load_agent_config(tmp_path), load_controller(tmp_path)
    objs = base_objects()
    ds = find(objs, "DaemonSet", "colo-agent")
    svc = find(objs, "Service", "colo-agent")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    key, _, value = ctl.agent.endpointslice_selector.partition("=")
    assert (key, value) == ("kubernetes.io/service-name", svc["metadata"]["name"])
    assert svc["metadata"]["namespace"] == ds["metadata"]["namespace"] == ctl.agent.namespace
    (port,) = svc["spec"]["ports"]
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    listen = cfg.listen_address(in_cluster=True)[1]
    assert port["port"] == container_port(c, port["targetPort"]) == listen == ctl.agent.port


# ---------------------------------------------------------------------------------------------------------
# the controller Deployment and the scheduler extender


def test_controller_deployment_runs_two_replicas_as_configured(tmp_path: Path) -> None:
    ctl = load_controller(tmp_path)
    objs = base_objects()
    dep = find(objs, "Deployment", "colo-controller")
    assert dep["spec"]["replicas"] == 2 and ctl.leader_election.enabled
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["command"] == ["colo-controller"] and spec["serviceAccountName"] == "colo-controller"
    (arg,) = c["args"]
    config_path = arg.removeprefix("--config=")
    mount, volume = mount_for(spec, c, config_path)
    sources = {s["configMap"]["name"]: s["configMap"]["items"] for s in volume["projected"]["sources"]}
    assert sources["colo-controller"] == [{"key": "config.yaml", "path": os.path.basename(config_path)}]
    assert ctl.policy_file is not None
    assert os.path.dirname(ctl.policy_file) == mount["mountPath"] == os.path.dirname(config_path)
    assert sources["colo-controller-policy"] == [{"key": "policy.yaml", "path": os.path.basename(ctl.policy_file)}]
    port = int(ctl.listen.rpartition(":")[2])
    assert [p["containerPort"] for p in c["ports"]] == [port]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert container_port(c, c[probe]["httpGet"]["port"]) == port
    assert dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    svc = find(objs, "Service", "colo-controller")
    (sp,) = svc["spec"]["ports"]
    assert container_port(c, sp["targetPort"]) == port
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert spec["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["capabilities"]["drop"] == ["ALL"]


#: k8s.io/kube-scheduler/config/v1 Extender's fields.
EXTENDER_FIELDS = {
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
    "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable",
}  # fmt: skip


def test_kube_scheduler_config_registers_the_extender() -> None:
    """kube-scheduler's own file is not in the OpenAPI schema: checked against the Extender's fields."""
    from controller.extender import Extender, create_app
    from controller.scoring import ScoreBoard, Scorer

    (doc,) = load_docs(BASE / "kube-scheduler-config.yaml")
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1" and doc["kind"] == "KubeSchedulerConfiguration"
    (ext,) = doc["extenders"]
    assert set(ext) <= EXTENDER_FIELDS, set(ext) - EXTENDER_FIELDS
    svc = find(base_objects(), "Service", "colo-controller")
    (port,) = svc["spec"]["ports"]
    assert ext["urlPrefix"] == f"https://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc:{port['port']}"
    assert ext["enableHTTPS"] is True and ext["tlsConfig"]["caFile"] and ext["ignorable"] is True
    assert isinstance(ext["weight"], int) and ext["weight"] > 0
    assert re.fullmatch(r"\d+(ms|s|m)", ext["httpTimeout"])
    app = create_app(
        Extender(ScoreBoard(Scorer(default_policy().spec)), ControllerConfig().classify), ControllerMetrics()
    )
    posts = {getattr(r, "path", "") for r in app.routes if "POST" in getattr(r, "methods", set())}
    assert {f"/{ext['filterVerb']}", f"/{ext['prioritizeVerb']}"} <= posts


# ---------------------------------------------------------------------------------------------------------
# RBAC against the API calls the code makes

KUBE_NAME = re.compile(r"^_?[kK]ube$")
PROJECT_PACKAGES = ("agent", "cgroup", "controller", "exporter", "serving")
Scope = Literal["cluster", "configured-namespace"]


@dataclass(frozen=True)
class Use:
    """One use of kube/ found in the source: a `Kube` method (called or referenced) or a constructor."""

    where: str
    call: str
    kind: str | None
    scope: Scope

    def permissions(self) -> tuple[Permission, ...]:
        return kp.permissions(self.call, self.kind)


@dataclass
class Scan:
    uses: list[Use] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _terminal(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def _is_kube(expr: ast.expr) -> bool:
    name = _terminal(expr)
    if name is not None and KUBE_NAME.match(name):
        return True
    return isinstance(expr, ast.Call) and ast.unparse(expr.func) == "Kube.connect"


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    args = call.args
    if len(args) > position and not any(isinstance(a, ast.Starred) for a in args[: position + 1]):
        return args[position]
    return None


def _namespaced(call: ast.Call) -> bool:
    """``namespace=`` given and not None (it is keyword-only in `Kube.list`, `Kube.watch` and `Informer`)."""
    ns = next((kw.value for kw in call.keywords if kw.arg == "namespace"), None)
    return ns is not None and not (isinstance(ns, ast.Constant) and ns.value is None)


def _kind(call: ast.Call, position: int, where: str, scan: Scan, what: str) -> str | None:
    arg = _argument(call, position, "kind")
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value in kp.KINDS:
        return arg.value
    shown = ast.unparse(arg) if arg is not None else "nothing"
    scan.problems.append(f"{where}: {what}: the kind must be a literal of {kp.KINDS}, got {shown}")
    return None


def scan_source(source: str, filename: str) -> Scan:
    """Every use of kube/ in one module, and what stops the scan from seeing them all."""
    tree = ast.parse(source, filename)
    calls = {id(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
    scan = Scan()
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("kube", "kubernetes"):
                    scan.problems.append(f"{where}: 'import {alias.name}': use 'from kube import ...' (unaliased)")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top = node.module.split(".")[0]
            if top == "kubernetes":
                scan.problems.append(f"{where}: the kubernetes client outside kube/: every API call goes through kube/")
            if top == "kube":
                for alias in node.names:
                    if alias.asname not in (None, alias.name):
                        scan.problems.append(f"{where}: {alias.name} imported as {alias.asname}: import it unaliased")
        elif isinstance(node, ast.Call) and _terminal(node.func) in kp.CONSTRUCTORS:
            name = cast(str, _terminal(node.func))
            rule = kp.CALLS[name]
            if rule.kind_verbs:
                kind = _kind(node, 1, where, scan, name)
                if kind is not None:
                    scope: Scope = "configured-namespace" if _namespaced(node) else "cluster"
                    scan.uses.append(Use(where, name, kind, scope))
            else:
                scan.uses.append(Use(where, name, None, cast(Scope, rule.scope)))
        elif isinstance(node, ast.Attribute) and _is_kube(node.value):
            _method_use(node, calls.get(id(node)), where, scan)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                annotation = ast.unparse(a.annotation) if a.annotation is not None else ""
                if re.search(r"\bKube\b", annotation) and not KUBE_NAME.match(a.arg):
                    scan.problems.append(f"{where}: a Kube parameter must be called kube, not {a.arg}")
        elif isinstance(node, ast.AnnAssign) and re.search(r"\bKube\b", ast.unparse(node.annotation)):
            if not KUBE_NAME.match(_terminal(node.target) or ""):
                scan.problems.append(f"{where}: a Kube must be called kube, not {ast.unparse(node.target)}")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                pairs: list[tuple[ast.expr, ast.expr]] = [(target, node.value)]
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts, strict=False))
                for t, v in pairs:
                    if _is_kube(v) and not KUBE_NAME.match(_terminal(t) or ""):
                        scan.problems.append(f"{where}: a Kube must be called kube, not {ast.unparse(t)}")
    return scan


def _method_use(node: ast.Attribute, call: ast.Call | None, where: str, scan: Scan) -> None:
    attr = node.attr
    rule = kp.CALLS.get(attr)
    if rule is None or attr in kp.CONSTRUCTORS:
        scan.problems.append(f"{where}: kube.{attr} is not in kube/permissions.py CALLS")
        return
    if rule.kind_verbs:
        if call is None:
            scan.problems.append(f"{where}: kube.{attr} passed around: its kind cannot be resolved, call it")
            return
        kind = _kind(call, 0, where, scan, f"kube.{attr}")
        if kind is not None:
            scan.uses.append(Use(where, attr, kind, "configured-namespace" if _namespaced(call) else "cluster"))
        return
    scan.uses.append(Use(where, attr, None, cast(Scope, rule.scope)))


def module_file(module: str) -> Path | None:
    parts = module.split(".")
    if parts[0] not in PROJECT_PACKAGES:
        return None
    base = ROOT.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports_of(path: Path) -> set[Path]:
    """Project modules (kube/ excluded: its calls are what the table maps) that a module imports."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[Path] = set()

    def add(module: str) -> None:
        parts = module.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b runs a/__init__.py too
            f = module_file(".".join(parts[:i]))
            if f is not None:
                found.add(f)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            add(base)
            for alias in node.names:
                if module_file(f"{base}.{alias.name}") is not None:
                    add(f"{base}.{alias.name}")
    return found


def component_files(package: str) -> list[Path]:
    """The package's modules and every project module they import, transitively (kube/ excluded)."""
    todo = sorted((ROOT / package).glob("*.py"))
    seen: set[Path] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo.extend(imports_of(f) - seen)
    return sorted(seen)


def scan_component(package: str) -> Scan:
    total = Scan()
    for f in component_files(package):
        one = scan_source(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))
        total.uses += one.uses
        total.problems += one.problems
    return total


Needs = dict[Permission, dict[Scope, list[str]]]


def needs(uses: Iterable[Use]) -> Needs:
    out: Needs = {}
    for use in uses:
        for p in use.permissions():
            out.setdefault(p, {}).setdefault(use.scope, []).append(f"{use.call} at {use.where}")
    return out


@dataclass
class Grants:
    """What the roles bound to one ServiceAccount grant: cluster-wide and per namespace."""

    cluster: dict[Permission, str] = field(default_factory=dict)  # -> role
    namespaced: dict[str, dict[Permission, str]] = field(default_factory=dict)
    rules: list[tuple[str, Obj]] = field(default_factory=list)  # (namespace or "", rule)


def grants_for(objs: Iterable[Obj], service_account: str, namespace: str) -> Grants:
    objs = list(objs)

    def binds(binding: Obj) -> bool:
        return any(
            (s.get("kind"), s.get("name"), s.get("namespace")) == ("ServiceAccount", service_account, namespace)
            for s in binding.get("subjects", [])
        )

    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objs}
    out = Grants()
    for binding in objs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding") or not binds(binding):
            continue
        ref = binding["roleRef"]
        bound_ns = binding["metadata"].get("namespace", "") if binding["kind"] == "RoleBinding" else ""
        role_ns = bound_ns if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        assert role is not None, f"{binding['kind']} {binding['metadata']['name']} refers to a missing {ref}"
        for rule in role.get("rules", []):
            out.rules.append((bound_ns, rule))
            for p in kp.expand_rules([rule]):
                if bound_ns:
                    out.namespaced.setdefault(bound_ns, {})[p] = ref["name"]
                else:
                    out.cluster[p] = ref["name"]
    return out


def rbac_problems(
    need: Needs,
    grants: Grants,
    namespace: str,
    optional: Iterable[Permission] = (),
    names: Mapping[str, str] = {},
    non_resource: Iterable[Obj] = (),
) -> list[str]:
    """Missing and superfluous grants. ``namespace``: where the configured-namespace calls go; ``names``:
    resource -> the only object name a rule may restrict it to (resourceNames); ``non_resource``: the only
    non-resource rules allowed (an HTTP path of Colo's own servers the account reads)."""
    optional = set(optional)
    problems: list[str] = []
    cluster_need = {p for p, s in need.items() if "cluster" in s} - optional
    ns_need = {p for p, s in need.items() if set(s) == {"configured-namespace"}} - optional
    ns_grants = grants.namespaced.get(namespace, {})
    for p in sorted(cluster_need):
        if p not in grants.cluster:
            problems.append(f"missing cluster-wide {p}, needed by {need[p]['cluster']}")
    for p in sorted(ns_need):
        if p not in grants.cluster and p not in ns_grants:
            problems.append(f"missing {p} in namespace {namespace}, needed by {need[p]['configured-namespace']}")
    for p, role in sorted(grants.cluster.items()):
        if p not in cluster_need:
            why = "only needed in its own namespace" if p in ns_need else "no call needs it"
            problems.append(f"ClusterRole {role} grants {p}: {why}")
    for ns, granted in sorted(grants.namespaced.items()):
        for p, role in sorted(granted.items()):
            if ns != namespace or p not in ns_need:
                problems.append(f"Role {ns}/{role} grants {p}: no call needs it there")
    for ns, rule in grants.rules:
        values = [*rule.get("apiGroups", []), *rule.get("resources", []), *rule.get("verbs", [])]
        if "*" in values or (rule.get("nonResourceURLs") and rule not in list(non_resource)):
            problems.append(f"wildcard or non-resource rule {rule}")
        for resource in rule.get("resources", []):
            restricted = rule.get("resourceNames")
            if restricted is not None and (not ns or restricted != [names.get(resource)]):
                problems.append(f"resourceNames {restricted} on {resource}: expected [{names.get(resource)}]")
    return problems


def test_every_public_kube_method_is_in_the_permission_table() -> None:
    public = {
        name
        for name, member in inspect.getmembers(Kube)
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    }
    table = set(kp.CALLS) - kp.CONSTRUCTORS
    assert public - table == set(), "add these Kube methods to kube/permissions.py CALLS"
    assert table - public == set(), "kube/permissions.py CALLS names methods Kube does not have"


class _Response:
    status = 200
    reason = "OK"
    headers: dict[str, str] = {}
    data = b'{"metadata": {"resourceVersion": "7"}, "spec": {}}'

    def release_conn(self) -> None:
        pass


class _RecordingApiClient:
    """Stands in for kubernetes.client.ApiClient: records each request, answers 200 with a bare object."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    def param_serialize(self, *, method: str, resource_path: str, query_params: list[tuple[str, str]],
                        **_: object) -> tuple[str, str]:  # fmt: skip
        self.requests.append((method, resource_path, dict(query_params)))
        return method, resource_path

    def call_api(self, *_: object, **__: object) -> SimpleNamespace:
        return SimpleNamespace(response=_Response())

    def close(self) -> None:
        pass


_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/[^/]+)?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


def rbac_of_request(method: str, path: str, query: Mapping[str, str]) -> Permission:
    """The permission the API server's authorizer checks for one request (RequestInfo's rules)."""
    m = _PATH.match(path)
    assert m is not None, path
    resource = m["plural"] + (f"/{m['sub']}" if m["sub"] else "")
    named = m["name"] is not None
    verb = {
        "GET": "get" if named else ("watch" if query.get("watch") == "true" else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }[method]
    return Permission(m["group"] or "", resource, verb)


#: One representative call of each Kube method: the kind-taking ones for every kind.
SAMPLE_CALLS: dict[str, Callable[[Kube, str | None], object]] = {
    "close": lambda k, _: k.close(),
    "list": lambda k, kind: k.list(cast(Any, kind), namespace="ns"),
    "watch": lambda k, kind: k.watch(cast(Any, kind), resource_version="1", namespace="ns"),
    "get_node": lambda k, _: k.get_node("n1"),
    "patch_node_annotations": lambda k, _: k.patch_node_annotations("n1", {"a": "b"}),
    "patch_node_labels": lambda k, _: k.patch_node_labels("n1", {"a": "b"}),
    "patch_node_extended_resources": lambda k, _: k.patch_node_extended_resources("n1", {"x/y": "1"}),
    "set_node_taint": lambda k, _: k.set_node_taint("n1", "colo/evicting", "true", "NoSchedule", True),
    "evict_pod": lambda k, _: k.evict_pod("ns", "p1"),
    "create_event": lambda k, _: k.create_event(
        kind="Pod", name="p1", namespace="ns", uid=None, reason="R", message="m", event_type="Normal", component="colo"
    ),
    "get_lease": lambda k, _: k.get_lease("ns", "l1"),
    "create_lease": lambda k, _: k.create_lease("ns", {"metadata": {"name": "l1"}}),
    "replace_lease": lambda k, _: k.replace_lease("ns", "l1", {"metadata": {"name": "l1"}}),
    "review_token": lambda k, _: k.review_token("t"),
    "review_access": lambda k, _: k.review_access(User("u", "", (), ()), "get", "/metrics"),
}


@pytest.mark.parametrize("method", sorted(set(kp.CALLS) - kp.CONSTRUCTORS))
def test_the_table_says_what_each_kube_method_really_requests(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if method == "connect":
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        assert Kube.connect() is None and kp.permissions("connect") == (), "connect makes no request"
        return
    assert method in SAMPLE_CALLS, f"add a sample call of Kube.{method} to SAMPLE_CALLS"
    kinds: list[str | None] = list(kp.KINDS) if kp.CALLS[method].kind_verbs else [None]
    for kind in kinds:
        client = _RecordingApiClient()
        SAMPLE_CALLS[method](Kube(cast(Any, client)), kind)
        sent = {rbac_of_request(*r) for r in client.requests}
        assert sent == set(kp.permissions(method, kind)), (method, kind, client.requests)


def kube_methods_called_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and _is_kube(n.value) and n.attr in kp.CALLS}


def test_informer_and_leader_elector_entries_match_what_they_call() -> None:
    informer_calls = kube_methods_called_in(ROOT / "kube" / "informer.py")
    assert informer_calls == {"list", "watch"}
    verbs = {v for m in informer_calls for v in kp.CALLS[m].kind_verbs}
    assert set(kp.CALLS["Informer"].kind_verbs) == verbs and not kp.CALLS["Informer"].permissions
    lease_calls = kube_methods_called_in(ROOT / "kube" / "lease.py")
    assert lease_calls == {"get_lease", "create_lease", "replace_lease"}
    assert set(kp.CALLS["LeaderElector"].permissions) == {p for m in lease_calls for p in kp.permissions(m)}
    assert kp.CALLS["LeaderElector"].scope == "configured-namespace"


def test_the_scan_finds_calls_constructors_and_references() -> None:
    source = """
from kube import Informer, Kube, LeaderElector
from testsupport.strategies import default_strategies

class Thing:
    def __init__(self, kube: Kube, ns: str) -> None:
        self.kube = kube
        self.pods = Informer(kube, "pods", field_selector="spec.nodeName=n")
        self.slices = Informer(kube, kind="endpointslices", namespace=ns)
        self.elector = LeaderElector(kube, ns, "name", "me")
        self.patch = kube.patch_node_annotations      # a reference counts
        self.get_node = lambda: None                  # not the Kube method

    def run(self) -> None:
        self.kube.evict_pod("ns", "p")
        self.get_node()
        items, _ = self.kube.list("nodes")
"""
    scan = scan_source(source, "example.py")
    assert scan.problems == []
    got = {(u.call, u.kind, u.scope) for u in scan.uses}
    assert got == {
        ("Informer", "pods", "cluster"),
        ("Informer", "endpointslices", "configured-namespace"),
        ("LeaderElector", None, "configured-namespace"),
        ("patch_node_annotations", None, "cluster"),
        ("evict_pod", None, "cluster"),
        ("list", "nodes", "cluster"),
    }
    assert Permission("", "pods/eviction", "create") in needs(scan.uses)


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("def f(kube):\n    kube.delete_node('n')\n", "not in kube/permissions.py"),
        ("def f(kube, k):\n    kube.list(k)\n", "the kind must be a literal"),
        ("from kube import Informer\ndef f(kube, k):\n    Informer(kube, k)\n", "the kind must be a literal"),
        ("def f(kube):\n    g(kube.watch)\n", "cannot be resolved"),
        ("from kube import Kube\ndef f(client: Kube):\n    client.evict_pod('a', 'b')\n", "must be called kube"),
        ("def f(self, kube):\n    self.api = kube\n", "must be called kube"),
        ("from kube import Informer as I\n", "unaliased"),
        ("from kubernetes.client import CoreV1Api\n", "outside kube/"),
        ("from kubernetes.utils import parse_quantity\n", "outside kube/"),
        ("def f(kube):\n    kube.api_client.call_api()\n", "not in kube/permissions.py"),
    ],
)
def test_the_scan_refuses_what_it_cannot_account_for(source: str, problem: str) -> None:
    problems = scan_source(source, "example.py").problems
    assert problems and all(problem in p for p in problems), problems


def test_the_component_scans_see_the_real_calls() -> None:
    agent, controller = scan_component("colo_agent"), scan_component("controller")
    assert agent.problems == [] and controller.problems == []
    assert {u.call for u in agent.uses} >= {"Informer", "evict_pod", "create_event", "patch_node_annotations"}
    assert {u.call for u in controller.uses} >= {"Informer", "LeaderElector", "patch_node_annotations"}
    assert any(f.parts[-2:] == ("cluster", "link.py") for f in component_files("colo_agent"))
    assert not any(f.parts[-2] == "kube" for f in component_files("colo_agent") + component_files("controller"))


def test_agent_rbac_grants_exactly_what_agent_code_calls() -> None:
    scan = scan_component("colo_agent")
    assert scan.problems == []
    need = needs(scan.uses)
    optional = {p for g in kp.OPTIONAL_GRANTS for p in g.permissions}
    grants = grants_for(base_objects(), "colo-agent", NAMESPACE)
    assert rbac_problems(need, grants, NAMESPACE, optional) == []
    assert set(grants.cluster.values()) == {"colo-agent"}


#: Controller modules whose calls run with the operator's credentials, never the ServiceAccount's:
#: `colo-controller --purge-node-state` runs after an uninstall, when the controller's RBAC is gone.
OPERATOR_MODULES = ("controller/purge.py",)


def test_controller_rbac_grants_exactly_what_controller_code_calls(tmp_path: Path) -> None:
    scan = scan_component("controller")
    assert scan.problems == []
    scan.uses = [u for u in scan.uses if not u.where.startswith(OPERATOR_MODULES)]
    ctl = load_controller(tmp_path)
    assert ctl.agent.namespace == ctl.leader_election.namespace, "one Role covers both"
    grants = grants_for(base_objects(), "colo-controller", NAMESPACE)
    names = {"leases": ctl.leader_election.name}
    # rebalancing reads the agents' /api/v1/pods, which they serve only to tokens allowed `get` on it
    agent_pods = {"nonResourceURLs": [ctl.rebalance.pods_path], "verbs": ["get"]}
    assert ctl.agent.bearer_token_file and agent_pods in [rule for _, rule in grants.rules]
    optional = {p for g in kp.CONTROLLER_OPTIONAL_GRANTS for p in g.permissions}
    problems = rbac_problems(
        needs(scan.uses), grants, ctl.leader_election.namespace, optional, names=names, non_resource=[agent_pods]
    )
    assert problems == []
    assert set(grants.namespaced) == {NAMESPACE}


def test_the_controllers_optional_grants_are_needed_and_only_in_their_component() -> None:
    need = needs(scan_component("controller").uses)
    main = grants_for(base_objects(), "colo-controller", NAMESPACE)
    for grant in kp.CONTROLLER_OPTIONAL_GRANTS:
        assert set(grant.permissions) <= set(need), f"{grant.component}: no call needs {grant.permissions}"
        assert not set(grant.permissions) & set(main.cluster), "not in the main ClusterRole"
        extra = grants_for(component_resources(grant.component) + base_objects(), "colo-controller", NAMESPACE)
        assert set(extra.cluster) - set(main.cluster) == set(grant.permissions)
        assert grant.setting in ControllerConfig.model_fields


def test_the_rbac_check_fails_on_a_missing_or_extra_grant() -> None:
    need = needs(scan_component("colo_agent").uses)
    optional = {p for g in kp.OPTIONAL_GRANTS for p in g.permissions}
    good = grants_for(base_objects(), "colo-agent", NAMESPACE)
    # a new call without its permission
    with_new_call = needs([*scan_component("colo_agent").uses, Use("new.py:1", "patch_node_labels", None, "cluster")])
    assert rbac_problems(with_new_call, good, NAMESPACE, optional) == []  # nodes patch already granted
    with_new_call = needs([*scan_component("colo_agent").uses, Use("new.py:1", "create_lease", None, "cluster")])
    assert any("missing cluster-wide leases.coordination.k8s.io create" in p
               for p in rbac_problems(with_new_call, good, NAMESPACE, optional))  # fmt: skip
    # a grant no call needs
    extra = copy.deepcopy(good)
    extra.cluster[Permission("", "secrets", "get")] = "colo-agent"
    assert any("secrets get" in p for p in rbac_problems(need, extra, NAMESPACE, optional))
    # a grant declared optional (a component's) found in the main role
    status_patch = Permission("", "nodes/status", "patch")
    assert status_patch in good.cluster and rbac_problems(need, good, NAMESPACE, {*optional, status_patch})


# ---------------------------------------------------------------------------------------------------------
# the optional admission policy (agent-admission-policy.yaml)

NODE_CLAIM = "authentication.kubernetes.io/node-name"
#: Verbs that reach admission (reads never do).
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def admission_policy() -> tuple[Obj, Obj]:
    """The ValidatingAdmissionPolicy and its binding."""
    docs = load_docs(BASE / "agent-admission-policy.yaml")
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    return docs[0], docs[1]


def agent_identity() -> tuple[str, str]:
    """(namespace, service account) the agent's pods run as."""
    ds = find(base_objects(), "DaemonSet", "colo-agent")
    return ds["metadata"]["namespace"], ds["spec"]["template"]["spec"]["serviceAccountName"]


def agent_username() -> str:
    namespace, service_account = agent_identity()
    return f"system:serviceaccount:{namespace}:{service_account}"


def test_the_admission_policy_covers_every_node_write_of_the_agents_service_account() -> None:
    policy, binding = admission_policy()
    spec = policy["spec"]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert spec["failurePolicy"] == "Fail", "an expression that errors must refuse, never admit"
    (condition,) = spec["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == '{agent_username()}'"
    # every node resource any of the agent's roles (base and components) lets it write is matched
    objs = base_objects()
    for component in OPTIONAL_COMPONENTS:
        for name in kustomization(BASE / component).get("resources", []):
            objs += load_docs(BASE / component / name)
    grants = grants_for(objs, *reversed(agent_identity()))
    writes = {
        p.resource for p in grants.cluster if p.group == "" and p.resource.startswith("nodes") and p.verb in WRITE_VERBS
    }
    assert writes == {"nodes", "nodes/status"}
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == [""] and set(rule["resources"]) == writes
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}


class AdmissionPolicy:
    """A ValidatingAdmissionPolicy evaluated as kube-apiserver does, so its CEL is tested, not just parsed:
    resource rules and matchConditions select the request (a condition that errors denies); variables are
    evaluated in order (one that errors fails only the expressions that use it, as lazy evaluation would); a
    validation that is false denies with its message, one that errors denies (failurePolicy Fail). object and
    oldObject are plain JSON maps, as at admission time (kube-apiserver declares them dyn)."""

    def __init__(self, celpy: Any, policy: Obj) -> None:
        self._celpy = celpy
        env = celpy.Environment()
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail"
        self._rules = spec["matchConstraints"]["resourceRules"]

        def compile_(expr: str) -> Any:
            return env.program(env.compile(expr))

        self._conditions = [compile_(c["expression"]) for c in spec.get("matchConditions", [])]
        self._variables = [(v["name"], compile_(v["expression"])) for v in spec.get("variables", [])]
        self._validations = [
            (compile_(v["expression"]), compile_(v["messageExpression"]) if "messageExpression" in v else None,
             v.get("message", v["expression"]))
            for v in spec["validations"]
        ]  # fmt: skip

    def review(self, request: Obj, old: Obj | None, new: Obj | None) -> list[str] | None:
        """None when the policy does not apply, else the denials (empty: admitted)."""
        celpy, types = self._celpy, self._celpy.celtypes
        resource = request["resource"]["resource"] + (
            f"/{request['subResource']}" if request.get("subResource") else ""
        )
        if not any(
            request["resource"]["group"] in r["apiGroups"] and resource in r["resources"]
            and request["operation"] in r["operations"]
            for r in self._rules
        ):  # fmt: skip
            return None
        act: dict[str, Any] = {
            "request": celpy.json_to_cel(request),
            "object": celpy.json_to_cel(new),
            "oldObject": celpy.json_to_cel(old),
        }

        def run(program: Any) -> Any:
            try:
                return program.evaluate(act)
            except celpy.CELEvalError as exc:
                return exc

        matched = [run(c) for c in self._conditions]
        if any(isinstance(m, celpy.CELEvalError) for m in matched):
            return [f"error: {m}" for m in matched if isinstance(m, celpy.CELEvalError)]  # failurePolicy Fail
        if not all(matched):
            return None
        variables = types.MapType()
        act["variables"] = variables
        for name, program in self._variables:
            variables[types.StringType(name)] = run(program)
        denials: list[str] = []
        for program, message_program, message in self._validations:
            result = run(program)
            if isinstance(result, celpy.CELEvalError):
                denials.append(f"error: {result}")
            elif not result:
                custom = run(message_program) if message_program is not None else None
                denials.append(str(custom) if isinstance(custom, str) else message)
        return denials


@pytest.fixture(scope="module")
def agent_admission() -> AdmissionPolicy:
    celpy = pytest.importorskip("celpy", reason="cel-python (pip install cel-python) evaluates the policy's CEL")
    return AdmissionPolicy(celpy, admission_policy()[0])


def cluster_node(name: str) -> Obj:
    """A Node as the API server stores it, with what other writers (kubelet, admins) put there."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "100",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kubernetes.io/hostname": name, "volcano.sh/oversubscription": "true"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volcano.sh/evicting-cpu-high-watermark": "80"},
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1"}],
        },
        "spec": {
            "podCIDR": "10.0.1.0/24",
            "providerID": f"kind://docker/{name}",
            "taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "7800m", "memory": "15Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "nodeInfo": {"kubeletVersion": "v1.37.0"},
        },
    }


class NodeApiWithPolicy:
    """Stands in for kubernetes.client.ApiClient in front of an API server with the policy installed: GET and
    PATCH of nodes. A patch is applied as the API server does (merge or JSON patch, then the main resource
    keeps the stored status and the status subresource the stored spec; the field manager touches
    managedFields), reviewed by the policy as ``user`` with the token's node claim, and refused with 403."""

    def __init__(self, policy: AdmissionPolicy, user: str, node_claim: str | None) -> None:
        self.policy, self.user, self.node_claim = policy, user, node_claim
        self.nodes = {name: cluster_node(name) for name in ("n1", "n2")}
        self.denials: list[str] = []

    def param_serialize(self, *, method: str, resource_path: str, header_params: dict[str, str], body: Any = None,
                        **_: object) -> tuple[str, str, dict[str, str], Any]:  # fmt: skip
        return method, resource_path, header_params, body

    def call_api(self, method: str, path: str, headers: dict[str, str], body: Any, **_: object) -> SimpleNamespace:
        m = _PATH.match(path)
        assert m is not None and m["plural"] == "nodes" and m["name"] in self.nodes, path
        name, sub = m["name"], m["sub"] or ""
        old = self.nodes[name]
        if method == "GET":
            return self._answer(200, old)
        assert method == "PATCH", method
        try:
            if headers["Content-Type"] == "application/merge-patch+json":
                new = apply_merge_patch(old, body)
            else:
                new = apply_json_patch(old, body)
        except ValueError as exc:
            return self._answer(409, {"kind": "Status", "reason": "Conflict", "message": str(exc)})
        if sub == "status":
            new["spec"] = copy.deepcopy(old["spec"])
        else:
            new["status"] = copy.deepcopy(old["status"])
        new["metadata"]["managedFields"] = [
            *old["metadata"]["managedFields"],
            {"manager": "colo-agent", "operation": "Update"},
        ]
        extra = {} if self.node_claim is None else {NODE_CLAIM: [self.node_claim]}
        request = {
            "operation": "UPDATE",
            "name": name,
            "resource": {"group": "", "version": "v1", "resource": "nodes"},
            "subResource": sub,
            "userInfo": {"username": self.user, **({"extra": extra} if extra else {})},
        }
        denials = self.policy.review(request, old, new)
        if denials:
            self.denials += denials
            return self._answer(403, {"kind": "Status", "reason": "Forbidden", "message": "; ".join(denials)})
        new["metadata"]["resourceVersion"] = str(int(old["metadata"]["resourceVersion"]) + 1)
        self.nodes[name] = new
        return self._answer(200, new)

    @staticmethod
    def _answer(status: int, body: Obj) -> SimpleNamespace:
        data = json.dumps(body).encode()
        response = SimpleNamespace(status=status, reason="", headers={}, data=data, release_conn=lambda: None)
        return SimpleNamespace(response=response)


def test_the_admission_policy_admits_what_the_agent_writes_to_its_own_node(agent_admission: AdmissionPolicy) -> None:
    api = NodeApiWithPolicy(agent_admission, agent_username(), node_claim="n1")
    kube = Kube(cast(Any, api))
    kube.patch_node_annotations(
        "n1", {ANNOTATION_CPU: "2000", ANNOTATION_MEMORY: "1073741824", EVICTING_ANNOTATION: "true"}
    )
    kube.set_node_taint("n1", EVICTING_TAINT, "true", "NoSchedule", True)
    kube.patch_node_extended_resources("n1", {BATCH_CPU: "2000m", BATCH_MEMORY: "1Gi"})
    node = api.nodes["n1"]
    assert node["metadata"]["annotations"][ANNOTATION_CPU] == "2000"
    assert [t["key"] for t in node["spec"]["taints"]] == ["dedicated", EVICTING_TAINT]
    assert node["status"]["allocatable"][BATCH_MEMORY] == "1Gi" and node["status"]["capacity"]["cpu"] == "8"
    # and back
    kube.set_node_taint("n1", EVICTING_TAINT, "true", "NoSchedule", False)
    kube.patch_node_annotations("n1", {EVICTING_ANNOTATION: None})
    kube.patch_node_extended_resources("n1", {BATCH_CPU: None, BATCH_MEMORY: None})
    assert api.denials == []
    fresh = cluster_node("n1")
    assert api.nodes["n1"]["spec"] == fresh["spec"] and api.nodes["n1"]["status"] == fresh["status"]
    assert api.nodes["n1"]["metadata"]["annotations"] == {**fresh["metadata"]["annotations"], ANNOTATION_CPU: "2000",
                                                          ANNOTATION_MEMORY: "1073741824"}  # fmt: skip


#: Writes the agent never makes, each refused by the policy (run as the agent on node n1).
FORBIDDEN_WRITES: dict[str, Callable[[Kube], object]] = {
    "another node's annotation": lambda k: k.patch_node_annotations("n2", {EVICTING_ANNOTATION: "true"}),
    "another node's taint": lambda k: k.set_node_taint("n2", EVICTING_TAINT, "true", "NoSchedule", True),
    "another node's batch capacity": lambda k: k.patch_node_extended_resources("n2", {BATCH_CPU: "2"}),
    "a foreign annotation": lambda k: k.patch_node_annotations("n1", {"node.alpha.kubernetes.io/ttl": "30"}),
    "removing a foreign annotation": lambda k: k.patch_node_annotations("n1", {"node.alpha.kubernetes.io/ttl": None}),
    "a label, even volcano.sh/": lambda k: k.patch_node_labels("n1", {"volcano.sh/oversubscription": "false"}),
    "removing a foreign taint": lambda k: k.set_node_taint("n1", "dedicated", "db", "NoSchedule", False),
    "adding a foreign taint": lambda k: k.set_node_taint(
        "n1", "node.kubernetes.io/out-of-service", "x", "NoExecute", True
    ),
    "cordoning": lambda k: k._merge_patch_node("n1", {"spec": {"unschedulable": True}}),
    "a finalizer": lambda k: k._merge_patch_node("n1", {"metadata": {"finalizers": ["example.com/keep"]}}),
    "a foreign extended resource": lambda k: k.patch_node_extended_resources("n1", {"nvidia.com/gpu": "8"}),
    "the node's cpu capacity": lambda k: k.patch_node_extended_resources("n1", {"cpu": "64"}),
    "a condition": lambda k: k._merge_patch_node(
        "n1", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, sub="status"
    ),
}


@pytest.mark.parametrize("write", FORBIDDEN_WRITES, ids=list(FORBIDDEN_WRITES))
def test_the_admission_policy_refuses_other_writes(agent_admission: AdmissionPolicy, write: str) -> None:
    api = NodeApiWithPolicy(agent_admission, agent_username(), node_claim="n1")
    with pytest.raises(ApiError) as refused:
        FORBIDDEN_WRITES[write](Kube(cast(Any, api)))
    assert refused.value.status == 403 and "colo-agent" in str(refused.value)
    assert not any(d.startswith("error:") for d in api.denials), api.denials  # refused by a rule, not an error
    assert api.nodes == NodeApiWithPolicy(agent_admission, "x", None).nodes


def test_the_admission_policy_needs_the_tokens_node_claim(agent_admission: AdmissionPolicy) -> None:
    api = NodeApiWithPolicy(agent_admission, agent_username(), node_claim=None)
    with pytest.raises(ApiError, match="names none"):
        Kube(cast(Any, api)).patch_node_annotations("n1", {EVICTING_ANNOTATION: "true"})


def test_the_admission_policy_leaves_other_users_alone(agent_admission: AdmissionPolicy) -> None:
    namespace, _ = agent_identity()
    for user in (f"system:serviceaccount:{namespace}:colo-controller", "system:node:n2", "kubernetes-admin"):
        api = NodeApiWithPolicy(agent_admission, user, node_claim=None)
        Kube(cast(Any, api)).patch_node_labels("n2", {"example.com/role": "db"})
        assert api.denials == [] and api.nodes["n2"]["metadata"]["labels"]["example.com/role"] == "db"


def test_the_admission_policy_refuses_creating_or_deleting_even_its_own_node(agent_admission: AdmissionPolicy) -> None:
    user = {"username": agent_username(), "extra": {NODE_CLAIM: ["n1"]}}
    resource = {"group": "", "version": "v1", "resource": "nodes"}
    node = cluster_node("n1")
    for operation, old, new in (("DELETE", node, None), ("CREATE", None, node)):
        request = {"operation": operation, "name": "n1", "resource": resource, "subResource": "", "userInfo": user}
        assert agent_admission.review(request, old, new) == ["colo-agent may patch nodes, never create or delete them"]
    # Evictions are not matched: CEL sees the Eviction, not the pod's node (deploy/README.md)
    eviction = {**request, "operation": "CREATE", "resource": {"group": "", "version": "v1", "resource": "pods"},
                "subResource": "eviction"}  # fmt: skip
    assert agent_admission.review(eviction, None, {"kind": "Eviction"}) is None


# ---------------------------------------------------------------------------------------------------------
# the dashboard against the metrics emitted


def dashboard() -> Obj:
    doc = json.loads((BASE / "grafana-dashboard.json").read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def test_promql_metric_names() -> None:
    expr = (
        'sum by (class) (rate(colo_pod_cpu_usage_cores{instance=~"$instance", class!="x"}[$__rate_interval]))'
        " / on (node) group_left () colo_node_cpu_capacity_cores offset 5m > bool 0.5e3"
        " or histogram_quantile(0.99, sum(rate(colo_controller_cycle_duration_seconds_bucket[5m])) by (le))"
    )
    assert promql_metric_names(expr) == {
        "colo_pod_cpu_usage_cores",
        "colo_node_cpu_capacity_cores",
        "colo_controller_cycle_duration_seconds_bucket",
    }
    with pytest.raises(AssertionError, match="unknown PromQL function"):
        promql_metric_names("colo_pod_cpu_usage_cores(1)")


def synthetic_view() -> AgentView:
    """A node with online and offline pods, containers, interfaces and PSI, after 400 one-second ticks."""
    view = AgentView(WindowStore(), interval=1.0, node_name="node-a")

    def pod(uid: str, cls: str, qos: str, cpu: float, ws: int) -> PodSample:
        containers = tuple(ContainerSample(f"{uid}-c{i}", f"/kubepods/pod{uid}/c{i}", cpu / 2, ws // 2, ws // 4, ws // 2, 0.1) for i in range(2))  # fmt: skip
        meta = PodMeta(uid, "team-a", f"pod-{uid}", cast(Any, cls), {"quota.scheduling.koordinator.sh/name": "q"})
        return PodSample(meta, qos, f"/kubepods/pod{uid}", cpu, ws, ws // 2, ws + 10, 100, 0.1, containers,
                         {"cpu": Pressure(0.1, 0.05), "memory": Pressure(0.0, 0.0)})  # fmt: skip

    for i in range(400):
        pods = [
            pod("u1", "online", "Burstable", 1.0 + (i % 3) * 0.1, 2 << 30),
            pod("u2", "offline", "BestEffort", 0.5, 1 << 30),
        ]
        node = NodeSample(8.0, 2.0, 16 << 30, 5 << 30, 1 << 30, {"cpu": Pressure(0.2, None), "io": Pressure(0.1, 0.05)})
        snap = Snapshot(
            seq=i + 1, mono=1000.0 + i, wall=1.7e9 + i, node=node,
            tiers={"burstable": TierSample("burstable", "/kubepods/burstable", 1.0, 2 << 30)},
            pods={p.uid: p for p in pods},
            interfaces=(InterfaceSample("eth0", True, 1e3, 2e3), InterfaceSample("veth1", False, 1.0, 1.0)),
            duration_seconds=0.01,
        )  # fmt: skip
        samples = [(("node", "", "cpu"), 0.25), (("node", "", "memory"), 5 / 16)]
        for p in pods:
            samples += [(("pod", p.uid, "cpu"), p.cpu_cores or 0.0), (("pod", p.uid, "memory"), float(p.memory_working_set_bytes))]  # fmt: skip
        with view.windows_lock:
            view.windows.add_many(snap.mono, samples)
        view.publish(snap)
    return view


def sample_names(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def agent_metric_names(tmp_path: Path) -> set[str]:
    """Render the exporter's collector over a synthetic view with every stage's metric source attached.

    Capacity is rendered twice: computed, and enabled on a node without allocatable (published as 0)."""
    view = synthetic_view()
    snap = view.snapshot
    assert snap is not None
    node = {"metadata": {"name": "node-a", "labels": {"volcano.sh/oversubscription": "true"}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi"}}}  # fmt: skip
    layout = Layout("v2", {}, Mount(str(tmp_path)))
    enforcer = Enforcer(layout, PathModel("systemd", "/"), CgroupReader(layout), EnforcementConfig(ledger_file=""),
                        lambda: (8.0, 16 << 30), registered=[])  # fmt: skip
    enforcer.reports = {
        "cfs_quota": CpuReport("cfsQuota", 1.5, quota_cores={"u2": 1.5}),
        "memory_high": MemoryHighReport({"u2": 1 << 30}),
    }  # a pass's reports
    evictor = Evictor(cast(Kube, None), "node-a", lambda: node, CgroupWriter(layout), EvictionConfig())
    evictor.on_snapshot(snap)
    names: set[str] = set()
    for node_seen in (node, {"metadata": node["metadata"]}):
        owner = OversubscriptionOwner(view, OversubscriptionConfig(min_history_seconds=0))
        owner.on_state(node_state(snap, node_allocatable(node_seen)), node_seen)  # the pass's capacity stage
        owner.changes(node_seen, snap.mono)
        view.metric_sources.update(oversubscription=owner.metrics, enforcement=enforcer.metrics,
                                   eviction=evictor.metrics)  # fmt: skip
        families = ColoCollector(view).collect_snapshot(snap)
        names |= sample_names(encode_families(families, openmetrics=False).decode())
    return names


def controller_metric_names() -> set[str]:
    metrics = ControllerMetrics()
    for value in vars(metrics).values():
        labelnames = getattr(value, "_labelnames", ())
        if labelnames:
            value.labels(*["x"] * len(labelnames))  # a labelled family shows no sample until a child exists
    return sample_names(metrics.render().decode())


#: OversubscriptionOwner.metrics()'s capacity computation families (only once the owner has computed).
CAPACITY_COMPUTATION = {
    f"colo_capacity_{field_name}_{unit}"
    for field_name in ("reclaimable", "headroom", "system_usage", "online_peak")
    for unit in ("cores", "bytes")
}


def test_dashboard_queries_only_metrics_that_are_emitted(tmp_path: Path) -> None:
    emitted = agent_metric_names(tmp_path) | controller_metric_names()
    assert emitted >= CAPACITY_COMPUTATION, "the synthetic view's capacity owner must have computed"
    queried: dict[str, set[str]] = {}
    for expr in dashboard_queries(dashboard()):
        for name in promql_metric_names(expr):
            queried.setdefault(name, set()).add(expr)
    assert queried, "no queries found"
    unknown = {name: exprs for name, exprs in queried.items() if name not in emitted}
    assert unknown == {}, "the dashboard queries metrics nobody emits"
    # what the issue asks the dashboard to show
    wanted = {
        "colo_node_window_ratio",  # node windows
        "colo_pod_cpu_usage_cores",  # per-pod usage by class
        "colo_pod_memory_working_set_bytes",
        "colo_oversubscription_cpu_cores",  # oversubscribable capacity
        "colo_oversubscription_memory_bytes",
        "colo_node_batch_allocated_cpu_cores",  # batch pods' requests against it (issue 11)
        "colo_node_batch_free_memory_bytes",
        *CAPACITY_COMPUTATION,  # and the computation behind it
        "colo_offline_cpu_budget_cores",  # offline budget and quotas
        "colo_offline_pod_cpu_quota_cores",
        "colo_node_evicting",  # evicting state and evictions
        "colo_evictions_total",
        "colo_controller_cycles_total",  # controller cycles and scores
        "colo_controller_cycle_duration_seconds_bucket",
        "colo_controller_node_load_score",
    }
    assert wanted <= set(queried), wanted - set(queried)


def test_the_dashboard_check_catches_an_unknown_metric(tmp_path: Path) -> None:
    emitted = agent_metric_names(tmp_path) | controller_metric_names()
    assert "colo_pod_cpu_usage_cores" in emitted and "colo_evictions_total" in emitted
    assert not promql_metric_names('rate(colo_pod_cpu_seconds_total{pod="x"}[5m])') <= emitted


def test_dashboard_is_well_formed() -> None:
    doc = dashboard()
    panels = list(dashboard_panels(doc))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    assert doc["uid"] and doc["title"] and isinstance(doc["schemaVersion"], int)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for p in panels:
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]), p["title"]
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
            assert t["refId"] and t["expr"].strip()
            for var in re.findall(r"\$(\w+)", t["expr"]):
                assert var in variables or var.startswith("__"), f"{p['title']}: undefined variable ${var}"


def test_dashboard_asks_for_its_data_source_on_import() -> None:
    """Grafana's import dialog asks for each `__inputs` entry and substitutes `${NAME}` everywhere."""
    doc = dashboard()
    inputs = {i["name"]: i for i in doc["__inputs"]}
    assert [(i["type"], i["pluginId"]) for i in inputs.values()] == [("datasource", "prometheus")]
    text = json.dumps(doc)
    used = set(re.findall(r"\$\{(DS_\w+)\}", text))
    assert used == set(inputs), "every input is used and every ${DS_...} reference is an input"
    (variable,) = [v for v in doc["templating"]["list"] if v["type"] == "datasource"]
    assert variable["current"]["value"] == "${DS_PROMETHEUS}", "the panels' $datasource starts as the chosen one"
    required = {r["id"] for r in doc["__requires"]}
    assert {"grafana", "prometheus"} <= required
    assert {p["type"] for p in dashboard_panels(doc)} - {"row"} <= required, "every panel plugin is required"


# ---------------------------------------------------------------------------------------------------------
# the image


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    lines: list[tuple[str, str]] = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            lines.append((op.upper(), rest.strip()))
    return lines


def pyproject() -> Obj:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def lock_pins() -> dict[str, tuple[Version, int]]:
    """name -> (pinned version, number of hashes) from deploy/requirements.lock."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "requirements.lock").read_text(encoding="utf-8"))
    pins: dict[str, tuple[Version, int]] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})*)", line)
        assert m is not None, f"not a hashed pin: {line[:80]}"
        pins[canonicalize_name(m[1])] = (Version(m[2]), len(m[3].split()))
    return pins


def test_the_lock_pins_every_dependency_with_hashes() -> None:
    pins = lock_pins()
    project = pyproject()
    wanted = [Requirement(r) for r in project["project"]["dependencies"] + project["build-system"]["requires"]]
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in deploy/requirements.lock"
        version, _ = pins[name]
        assert req.specifier.contains(version, prereleases=True), f"{req.name}=={version} does not satisfy {req}"
    assert all(hashes > 0 for _, hashes in pins.values())
    header = (DEPLOY / "requirements.lock").read_text(encoding="utf-8").split("\n\n", 1)[0]
    assert "pip-compile" in header and "--generate-hashes" in header and "Python 3.11" in header


def test_dockerfile_builds_both_entry_points_from_the_lock() -> None:
    instructions = dockerfile_instructions()
    args = {rest.partition("=")[0]: rest.partition("=")[2] for op, rest in instructions if op == "ARG"}
    froms = [rest for op, rest in instructions if op == "FROM"]
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"
    assert all(f.startswith("${PYTHON_IMAGE}") for f in froms) and len(froms) == 2
    runs = " ".join(rest for op, rest in instructions if op == "RUN")
    assert "--require-hashes -r /tmp/requirements.lock" in runs
    assert "--no-deps --no-build-isolation --no-index ." in runs, "Colo itself brings no unpinned dependency"
    scripts = pyproject()["project"]["scripts"]
    assert set(scripts) == {"colo-agent", "colo-controller", "colo-sim"}
    for script in scripts:
        assert f"/opt/colo/bin/{script} " in runs, f"the build smoke-tests {script}"
    copies = [rest.split() for op, rest in instructions if op == "COPY" and not rest.startswith("--from")]
    sources = {src for c in copies for src in c[:-1]}
    assert "deploy/requirements.lock" in sources
    packages = {p.rstrip("*") for p in pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages | {"pyproject.toml", "README.md"} <= sources, "every package pyproject installs is copied"
    for src in sources:
        assert (ROOT / src).exists(), src
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    assert ignore[ignore.index("*") :][0] == "*"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert sources <= allowed, f"excluded from the build context: {sources - allowed}"


def test_controller_mounts_the_certificates_its_config_names(tmp_path: Path) -> None:
    cfg = load_controller(tmp_path)
    dep = find(base_objects(), "Deployment", "colo-controller")
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert cfg.serving.tls and cfg.serving.authenticate and cfg.agent.scheme == "https"
    for path, secret in ((cfg.serving.tls_cert_file, "colo-controller-tls"), (cfg.agent.tls_ca_file, "colo-agent-tls")):
        mount, volume = mount_for(spec, c, path or "")
        assert volume["secret"]["secretName"] == secret and mount.get("readOnly") is True
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["scheme"] == "HTTPS"
    assert cfg.extender.max_body_bytes == 8 << 20
