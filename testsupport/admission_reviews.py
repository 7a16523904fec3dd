"""AdmissionReview requests as kube-apiserver sends them to a mutating webhook for a pod CREATE.

By the time a mutating webhook is called, the API server has decoded and defaulted the pod and run the
built-in mutating plugins ordered before MutatingAdmissionWebhook: ServiceAccount (service account name,
token volume and mounts), Priority (`spec.priority` and `preemptionPolicy` from the class, 0 without
one), DefaultTolerationSeconds (the two not-ready/unreachable tolerations). `metadata.name` may still be
empty (generateName), `namespace` is set on the request; uid and resourceVersion are not set yet.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

from testsupport.k8sobjects import kube_api_access_volume

Obj = dict[str, Any]


def container(name: str, resources: Obj | None = None) -> Obj:
    """A container as the API server's defaulting leaves it."""
    c: Obj = {
        "name": name,
        "image": "registry.example.com/spark:3.5.1",
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "resources": resources if resources is not None else {},
        "volumeMounts": [
            {
                "name": "kube-api-access-x7k2p",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        ],
    }
    return c


def pod(
    *,
    namespace: str = "spark",
    labels: Obj | None = None,
    annotations: Obj | None = None,
    containers: list[Obj] | None = None,
    init_containers: list[Obj] | None = None,
    priority: int = 0,
    priority_class: str | None = None,
) -> Obj:
    spec: Obj = {
        "volumes": [kube_api_access_volume()],
        "containers": containers
        if containers is not None
        else [container("executor", {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1500m",
                                                                                           "memory": "3Gi"}})],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ],
        "priority": priority,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }  # fmt: skip
    if init_containers is not None:
        spec["initContainers"] = init_containers
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    meta: Obj = {"generateName": "spark-pi-exec-", "namespace": namespace, "creationTimestamp": None}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": spec, "status": {}}


def review(obj: Obj, *, dry_run: bool = False, operation: str = "CREATE", namespace: str | None = None) -> Obj:
    """The AdmissionReview kube-apiserver POSTs for `obj`."""
    ns = namespace if namespace is not None else obj["metadata"].get("namespace", "")
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "namespace": ns,
            "operation": operation,
            "userInfo": {
                "username": "system:serviceaccount:spark:spark-operator",
                "uid": "8b1f0c1e-6a2c-4f57-9a55-0c3d3b2a9d11",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:spark", "system:authenticated"],
            },
            "object": copy.deepcopy(obj),
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "spark-operator"},
        },
    }


def body(doc: Obj) -> bytes:
    return json.dumps(doc).encode()
