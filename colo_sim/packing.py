"""Packing of unplaced pods onto synthetic nodes, like a scheduler that never overcommits online requests.

First-fit decreasing, deterministic: pods sorted by their largest CPU request, then their largest memory
request (both descending), then name; each goes to the first node (in creation order) where the node's
requests stay within `pack_to` of its size in both resources, else onto a new node. A pod that does not fit
an empty node gets a node of its own. The packing is synthetic: traces without hosts (Bitbrains) have no
real placement to replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class NodeSize:
    cpu_cores: float
    memory_bytes: float


def pack(requests: Mapping[str, tuple[float, float]], size: NodeSize, pack_to: float) -> dict[str, int]:
    """Node index of every pod, from each pod's largest (cpu, memory) request."""
    cap_cpu, cap_mem = size.cpu_cores * pack_to, size.memory_bytes * pack_to
    order = sorted(requests, key=lambda pod: (-requests[pod][0], -requests[pod][1], pod))
    used: list[list[float]] = []
    out: dict[str, int] = {}
    for pod in order:
        cpu, mem = requests[pod]
        if cpu > cap_cpu + _EPS or mem > cap_mem + _EPS:
            out[pod] = len(used)
            used.append([cap_cpu, cap_mem])  # alone: nothing else fits beside it
            continue
        for i, (u_cpu, u_mem) in enumerate(used):
            if u_cpu + cpu <= cap_cpu + _EPS and u_mem + mem <= cap_mem + _EPS:
                used[i][0] += cpu
                used[i][1] += mem
                out[pod] = i
                break
        else:
            out[pod] = len(used)
            used.append([cpu, mem])
    return out
