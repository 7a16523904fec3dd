"""Requests, limits and allocatable: kube.resources (the official client's quantity parser lives in kube/)."""

from kube.resources import container_batch, node_allocatable, pod_limits, pod_requests, quantity

__all__ = ["container_batch", "node_allocatable", "pod_limits", "pod_requests", "quantity"]
