"""Colo's only door to the Kubernetes API: a dict-based client, informers and leader election."""

from kube import lean  # noqa: F401 - first: the official client without its package __init__ files
from kube.client import EvictionResult, Kube
from kube.errors import ApiError
from kube.failures import FailureLog
from kube.informer import Informer, Transform, object_key, resource_version
from kube.kinds import RESOURCES, Kind
from kube.lease import LeaderElector
from kube.quantity import parse_quantity
from kube.watch import WatchStream

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
    "parse_quantity",
    "resource_version",
]
