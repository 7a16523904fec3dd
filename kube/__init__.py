"""Colo's only door to the Kubernetes API: a dict-based client, informers and leader election."""

from kube.client import RESOURCES, ApiError, EvictionResult, Kind, Kube, WatchStream
from kube.failures import FailureLog
from kube.informer import Informer, Transform, object_key, resource_version
from kube.lease import LeaderElector

__all__ = [
    "RESOURCES",
    "ApiError",
    "EvictionResult",
    "FailureLog",
    "Informer",
    "Kind",
    "Kube",
    "LeaderElector",
    "Transform",
    "WatchStream",
    "object_key",
    "resource_version",
]
