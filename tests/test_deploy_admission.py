"""deploy/daemonset/colocation-profiles against the webhook's code: the admission file loads, the paths, ports
and names the Deployment, Service and MutatingWebhookConfiguration use agree with it."""

from __future__ import annotations

from pathlib import Path

from common.listen import split_host_port
from controller.admission.settings import DEFAULT_EXCLUDED_NAMESPACES, AdmissionSettings, load_admission
from controller.main import main as controller_main
from tests.test_deploy import (
    BASE,
    NAMESPACE,
    Obj,
    component_object,
    component_resources,
    config_text,
    container_port,
    find,
    load_controller,
)

COMPONENT = "colocation-profiles"


def webhook_config() -> Obj:
    return find(component_resources(COMPONENT), "MutatingWebhookConfiguration", "colo-colocation-profiles")


def controller_container() -> Obj:
    deployment = component_object(COMPONENT, "Deployment", "colo-controller")
    container: Obj = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def admission_settings(tmp_path: Path) -> AdmissionSettings:
    cm = find(component_resources(COMPONENT), "ConfigMap", "colo-controller-admission")
    path = tmp_path / "admission.yaml"
    path.write_text(config_text(cm, "admission.yaml"), encoding="utf-8")
    return load_admission(str(path))


def test_the_admission_file_loads_with_the_controllers_loader(tmp_path: Path) -> None:
    s = admission_settings(tmp_path)
    assert s.excluded_namespaces == DEFAULT_EXCLUDED_NAMESPACES
    assert [p.name for p in s.profiles] == ["spark-batch"] and s.profiles[0].batch_resources
    # and the controller accepts it on its command line, as the Deployment passes it
    base = tmp_path / "base.yaml"
    base.write_text("leader_election: {enabled: false}\n", encoding="utf-8")
    assert controller_main(["--config", str(base), "--admission", str(tmp_path / "admission.yaml"), "--check"]) == 0


def test_a_bad_admission_file_stops_the_controller_with_exit_2(tmp_path: Path, capsys: object) -> None:
    bad = tmp_path / "admission.yaml"
    bad.write_text("profiles:\n  - name: p\n    qos_level: LS\n", encoding="utf-8")
    assert controller_main(["--admission", str(bad), "--check"]) == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "invalid configuration" in err and "profiles[0].qos_level" in err and "Traceback" not in err


def test_the_deployment_reads_the_admission_file_and_mounts_the_certificate(tmp_path: Path) -> None:
    s = admission_settings(tmp_path)
    container = controller_container()
    spec = component_object(COMPONENT, "Deployment", "colo-controller")["spec"]["template"]["spec"]
    (arg,) = [a for a in container["args"] if a.startswith("--admission=")]
    admission_path = Path(arg.removeprefix("--admission="))
    # the admission file is projected into the config volume, next to config.yaml
    config_mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert admission_path.parent == Path(config_mount["mountPath"])
    config_volume = next(v for v in spec["volumes"] if v["name"] == "config")
    sources = [src["configMap"] for src in config_volume["projected"]["sources"]]
    assert {
        "name": "colo-controller-admission",
        "items": [{"key": "admission.yaml", "path": admission_path.name}],
    } in sources
    # the certificate files come from the TLS Secret's keys
    tls_mount = next(m for m in container["volumeMounts"] if m["name"] == "webhook-tls")
    assert tls_mount["readOnly"] is True
    tls_volume = next(v for v in spec["volumes"] if v["name"] == "webhook-tls")
    assert tls_volume["secret"]["secretName"] == "colo-controller-webhook-tls"
    for path, key in ((s.cert_file, "tls.crt"), (s.key_file, "tls.key")):
        assert Path(path) == Path(tls_mount["mountPath"]) / key
    # the webhook port is the one the file listens on
    assert container_port(container, "webhook") == split_host_port(s.listen)[1]


def test_the_webhook_configuration_reaches_the_service_and_is_safe(tmp_path: Path) -> None:
    s = admission_settings(tmp_path)
    (hook,) = webhook_config()["webhooks"]
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None" and hook["failurePolicy"] == "Ignore"
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert hook["reinvocationPolicy"] == "IfNeeded", "sidecars injected by later webhooks are converted too"
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert hook["objectSelector"] and hook["namespaceSelector"]
    # the namespaces the controller excludes are not even sent
    (expr,) = hook["namespaceSelector"]["matchExpressions"]
    assert (expr["key"], expr["operator"]) == ("kubernetes.io/metadata.name", "NotIn")
    assert set(expr["values"]) == set(s.excluded_namespaces)
    # the Service the API server calls leads to the webhook port, and the path is the server's
    svc_ref = hook["clientConfig"]["service"]
    assert (svc_ref["namespace"], svc_ref["path"]) == (NAMESPACE, "/mutate")
    service = component_object(COMPONENT, "Service", svc_ref["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == svc_ref["port"]]
    assert port["targetPort"] == "webhook" and container_port(controller_container(), "webhook") == 9443
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "colo-controller"}
    # the CA comes from cert-manager's Certificate, in Colo's namespace
    assert webhook_config()["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].startswith(f"{NAMESPACE}/")


def test_the_component_leaves_the_base_controller_config_alone(tmp_path: Path) -> None:
    assert load_controller(tmp_path).admission_file is None
    assert (BASE / COMPONENT / "kustomization.yaml").is_file()
