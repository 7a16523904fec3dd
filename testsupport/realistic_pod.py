"""A Pod as a real API server lists it (about 10 KB of JSON): managedFields, env, volumes, probes, conditions,
init containers and a sidecar, owner references, kubectl's last-applied annotation. testsupport/k8sobjects.py
builds the small pods most tests need; this one is for what depends on a pod's whole size and shape (the
agent's pod transform and its memory)."""

from __future__ import annotations

import json
from typing import Any

from testsupport.k8sobjects import NODE, kube_api_access_volume


def _probe(path: str, port: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port, "scheme": "HTTP"},
        "initialDelaySeconds": 5,
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }


def _container(name: str, image: str, requests: dict[str, str], limits: dict[str, str], port: int) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "command": ["/bin/server"],
        "args": ["--port", str(port), "--log-level=info", "--config=/etc/app/config.yaml"],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
            },
            {"name": "GOMAXPROCS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1"}}},
            {"name": "JAVA_OPTS", "value": "-XX:+UseG1GC -XX:MaxRAMPercentage=75 -Dfile.encoding=UTF-8"},
            {"name": "DATABASE_URL", "valueFrom": {"secretKeyRef": {"name": "db", "key": "url"}}},
        ],
        "resources": {"requests": requests, "limits": limits},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/app", "readOnly": True},
            {"name": "data", "mountPath": "/var/lib/app"},
            {
                "name": "kube-api-access-x7k2p",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            },
        ],
        "livenessProbe": _probe("/healthz", port),
        "readinessProbe": _probe("/ready", port),
        "startupProbe": _probe("/healthz", port),
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 5"]}}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _status(name: str, image: str, cid: str | None, *, init: bool = False) -> dict[str, Any]:
    state: dict[str, Any] = (
        {
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": "2026-11-22T10:00:03Z",
                "finishedAt": "2026-11-22T10:00:05Z",
                "containerID": f"containerd://{cid}",
            }
        }
        if init and cid
        else {"running": {"startedAt": "2026-11-22T10:00:06Z"}}
    )
    out: dict[str, Any] = {
        "name": name,
        "state": state,
        "lastState": {},
        "ready": not init,
        "restartCount": 0,
        "image": image,
        "imageID": f"{image.split(':')[0]}@sha256:{'ab' * 32}",
        "started": not init,
    }
    if cid is not None:
        out["containerID"] = f"containerd://{cid}"
    return out


def realistic_pod(
    name: str = "web-7d9c8f6b5d-x2x9q",
    uid: str = "8a4b1f0e-52c3-4d7e-9f21-3c6d2e1a9b70",
    *,
    namespace: str = "shop",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    priority: int | None = 0,
    priority_class: str | None = None,
    qos: str = "Burstable",
    phase: str = "Running",
    batch: bool = False,
    waiting: bool = False,
) -> dict[str, Any]:
    """A ReplicaSet's pod with three containers, an init container and a sidecar (restartPolicy Always),
    `spec.overhead`, as parsed JSON (each call a fresh object, as a watch event would be). `batch`: the app
    container asks for kubernetes.io/batch-* instead of cpu/memory; `waiting`: the last container has not
    started (its status has no containerID)."""
    n = int.from_bytes(uid.encode(), "little") % 10**9
    ids = [f"{n:09d}{i:03d}" + "c0ffee" * 9 + "ab" for i in range(5)]
    ids = [cid[:64] for cid in ids]
    app_req = (
        {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "536870912"}
        if batch
        else {"cpu": "250m", "memory": "256Mi", "ephemeral-storage": "1Gi"}
    )
    app_lim = (
        {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1073741824"}
        if batch
        else {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "2Gi"}
    )
    containers = [
        _container("app", "registry.example.com/shop/web:1.42.0", app_req, app_lim, 8080),
        _container("envoy", "envoyproxy/envoy:v1.31.2", {"cpu": "100m", "memory": "64Mi"}, {"memory": "128Mi"}, 9901),
        _container("log-shipper", "fluent/fluent-bit:3.1", {"cpu": "50m", "memory": "32Mi"}, {}, 2020),
    ]
    init = [
        {
            **_container(
                "migrate",
                "registry.example.com/shop/migrate:1.42.0",
                {"cpu": "500m", "memory": "512Mi"},
                {"cpu": "500m", "memory": "512Mi"},
                7000,
            )
        },
        {
            **_container(
                "mesh-agent",
                "registry.example.com/mesh/agent:2.3",
                {"cpu": "20m", "memory": "16Mi"},
                {"memory": "32Mi"},
                7001,
            ),
            "restartPolicy": "Always",
        },
    ]
    for c in init:
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            c.pop(probe)
    meta_annotations = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
            {
                "kind": "Pod",
                "spec": {"containers": [{"name": c["name"], "image": c["image"], "env": c["env"]} for c in containers]},
            }
        ),
        "kubectl.kubernetes.io/restartedAt": "2026-11-20T08:12:44Z",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9901",
        "cni.projectcalico.org/podIP": "10.244.3.17/32",
        "cni.projectcalico.org/containerID": ids[0],
        **(annotations or {}),
    }
    meta_labels = {
        "app.kubernetes.io/name": "web",
        "app.kubernetes.io/part-of": "shop",
        "pod-template-hash": "7d9c8f6b5d",
        "security.istio.io/tlsMode": "istio",
        **(labels or {}),
    }
    spec: dict[str, Any] = {
        "volumes": [
            {"name": "config", "configMap": {"name": "web-config", "defaultMode": 420}},
            {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
            kube_api_access_volume(),
        ],
        "initContainers": init,
        "containers": containers,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "web",
        "serviceAccount": "web",
        "nodeName": NODE,
        "securityContext": {"fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "web"}},
                        },
                    }
                ]
            }
        },
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "runtimeClassName": "kata",
        "overhead": {"cpu": "50m", "memory": "40Mi"},
    }
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    images = {c["name"]: c["image"] for c in containers + init}
    statuses = [_status(c["name"], images[c["name"]], ids[2 + i]) for i, c in enumerate(containers)]
    if waiting:
        statuses[-1] = _status(containers[-1]["name"], images[containers[-1]["name"]], None)
    conditions = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": f"2026-11-22T10:00:0{i}Z"}
        for i, t in enumerate(("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"))
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": name.rsplit("-", 1)[0] + "-",
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "48213377",
            "creationTimestamp": "2026-11-22T10:00:00Z",
            "labels": meta_labels,
            "annotations": meta_annotations,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": name.rsplit("-", 1)[0],
                    "uid": "0f5b0a4e-8d5c-4c3e-a1b2-9e8d7c6b5a41",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-22T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:generateName": {},
                            "f:labels": {f"f:{k}": {} for k in meta_labels},
                            "f:ownerReferences": {},
                        },
                        "f:spec": {
                            "f:containers": {
                                f'k:{{"name":"{c["name"]}"}}': {
                                    ".": {},
                                    "f:env": {},
                                    "f:image": {},
                                    "f:name": {},
                                    "f:ports": {},
                                    "f:resources": {"f:limits": {}, "f:requests": {}},
                                    "f:volumeMounts": {},
                                }
                                for c in containers
                            }
                        },
                    },
                },
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-22T10:00:07Z",
                    "fieldsType": "FieldsV1",
                    "subresource": "status",
                    "fieldsV1": {
                        "f:status": {
                            "f:conditions": {
                                f'k:{{"type":"{c["type"]}"}}': {
                                    ".": {},
                                    "f:lastProbeTime": {},
                                    "f:lastTransitionTime": {},
                                    "f:status": {},
                                    "f:type": {},
                                }
                                for c in conditions
                            },
                            "f:containerStatuses": {},
                            "f:hostIP": {},
                            "f:phase": {},
                            "f:podIP": {},
                            "f:startTime": {},
                        }
                    },
                },
            ],
        },
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": conditions,
            "hostIP": "10.0.3.21",
            "hostIPs": [{"ip": "10.0.3.21"}],
            "podIP": "10.244.3.17",
            "podIPs": [{"ip": "10.244.3.17"}],
            "startTime": "2026-11-22T10:00:00Z",
            "initContainerStatuses": [
                _status(c["name"], images[c["name"]], ids[i], init=c.get("restartPolicy") is None)
                for i, c in enumerate(init)
            ],
            "containerStatuses": statuses,
            "qosClass": qos,
        },
    }
    out: dict[str, Any] = json.loads(json.dumps(pod))
    return out
