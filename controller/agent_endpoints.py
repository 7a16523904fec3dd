"""Where each node's agent answers: its Service's EndpointSlices, else the node's InternalIP.

Pure functions over the informers' objects, so they are trivially testable and the poller never talks to
the Kubernetes API itself.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from controller.config import AgentSettings
from controller.nodes import node_name


def _host(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    return f"[{address}]" if ip.version == 6 else address


def agent_url(settings: AgentSettings, address: str, port: int) -> str:
    """`http://10.0.0.1:9817/api/v1/node` (IPv6 bracketed)."""
    return f"{settings.scheme}://{_host(address)}:{port}{settings.path}"


def _slice_port(ep_slice: Mapping[str, Any], wanted: int) -> int | None:
    ports = [p for p in ep_slice.get("ports") or [] if isinstance(p, Mapping)]
    numbers = [p.get("port") for p in ports if isinstance(p.get("port"), int)]
    if wanted in numbers:
        return wanted
    tcp = [p.get("port") for p in ports if p.get("protocol", "TCP") == "TCP" and isinstance(p.get("port"), int)]
    return tcp[0] if tcp else None


def endpoints_by_node(slices: Iterable[Mapping[str, Any]], settings: AgentSettings) -> dict[str, str]:
    """node name -> agent URL from ready endpoints (`ready: null` means ready, per the API)."""
    out: dict[str, str] = {}
    for ep_slice in slices:
        if ep_slice.get("addressType", "IPv4") not in ("IPv4", "IPv6"):
            continue
        port = _slice_port(ep_slice, settings.port)
        if port is None:
            continue
        for ep in ep_slice.get("endpoints") or []:
            if not isinstance(ep, Mapping):
                continue
            node = ep.get("nodeName")
            addresses = ep.get("addresses") or []
            conditions = ep.get("conditions") or {}
            if not isinstance(node, str) or not node or not addresses or not isinstance(conditions, Mapping):
                continue
            if conditions.get("ready") is False or conditions.get("terminating") is True:
                continue
            if isinstance(addresses[0], str):
                out.setdefault(node, agent_url(settings, addresses[0], port))
    return out


def internal_ip(node: Mapping[str, Any]) -> str | None:
    """The node's first InternalIP."""
    status = node.get("status")
    addresses = status.get("addresses") if isinstance(status, Mapping) else None
    for a in addresses or []:
        if isinstance(a, Mapping) and a.get("type") == "InternalIP" and isinstance(a.get("address"), str):
            return str(a["address"])
    return None


def discover(
    nodes: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    settings: AgentSettings,
    *,
    internal_ip_fallback: bool = True,
) -> dict[str, str]:
    """node -> URL for every known node that has an endpoint, or (with `internal_ip_fallback`) an
    InternalIP. These are the nodes in scope: only they are polled and annotated."""
    from_slices = endpoints_by_node(slices, settings) if settings.use_endpointslices else {}
    internal_ip_fallback = internal_ip_fallback or not settings.use_endpointslices
    out: dict[str, str] = {}
    for node in nodes:
        name = node_name(node)
        if name is None:
            continue
        url = from_slices.get(name)
        if url is None:
            if not internal_ip_fallback:
                continue
            ip = internal_ip(node)
            if ip is None:
                continue
            url = agent_url(settings, ip, settings.port)
        out[name] = url
    return out
