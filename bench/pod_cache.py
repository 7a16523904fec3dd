"""What the agent's pod informer holds per pod, whole and through the agent's transform (agent/sense/pod_fields.py),
and what the transform costs per watched pod.

Each pod is parsed from its own JSON text, as a watch event is, and kept as the informer's cache would keep
it; the retained size is what tracemalloc counts as still allocated afterwards (the slim pod's strings are
shared with the parsed one, so they are counted). Two shapes: a realistic Pod as an API server lists it
(testsupport/realistic_pod.py, about 18 KB of JSON with managedFields, env, probes, volumes, five
containers) and the small pods of the benchmarks' fake cluster (testsupport/k8sobjects.py).

    .venv/bin/python -m bench.pod_cache [--pods 250] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from agent.sense.pod_fields import pod_transform
from testsupport.k8sobjects import pod as small_pod
from testsupport.realistic_pod import realistic_pod

LABEL_KEYS = ("quota.scheduling.koordinator.sh/name",)  # the agent's default aggregate_label_keys


def _texts(make: Callable[[int], dict[str, Any]], n: int) -> list[str]:
    return [json.dumps(make(i)) for i in range(n)]


def retained(texts: list[str], keep: Callable[[dict[str, Any]], Any]) -> int:
    """Bytes still allocated after parsing every text and keeping `keep` of it."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        held = [keep(json.loads(t)) for t in texts]
        size = tracemalloc.get_traced_memory()[0] - base
        del held
        return size
    finally:
        tracemalloc.stop()


def transform_us(texts: list[str], keep: Callable[[dict[str, Any]], Any]) -> float:
    """Microseconds per pod of the transform alone (the pods parsed beforehand)."""
    pods = [json.loads(t) for t in texts]
    start = time.perf_counter()
    for p in pods:
        keep(p)
    return (time.perf_counter() - start) / len(pods) * 1e6


def _spread(values: list[float], digits: int = 0) -> str:
    med, lo, hi = statistics.median(values), min(values), max(values)
    return f"median {med:,.{digits}f} (min {lo:,.{digits}f}, max {hi:,.{digits}f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    slim = pod_transform(LABEL_KEYS)
    shapes: dict[str, Callable[[int], dict[str, Any]]] = {
        "realistic": lambda i: realistic_pod(f"web-7d9c8f6b5d-{i:05d}", f"{i:08d}-52c3-4d7e-9f21-3c6d2e1a9b70"),
        "small (bench)": lambda i: small_pod(f"p{i}", f"uid-{i}", container_ids=[f"{i:012x}" * 2] * 3,
                                             cpu_request="500m", memory_request="256Mi"),
    }  # fmt: skip
    for shape, make in shapes.items():
        texts = _texts(make, args.pods)
        json_bytes = sum(len(t) for t in texts) / args.pods
        whole = [retained(texts, lambda p: p) / args.pods for _ in range(args.repeat)]
        kept = [retained(texts, slim) / args.pods for _ in range(args.repeat)]
        cost = [transform_us(texts, slim) for _ in range(args.repeat)]
        print(f"{shape} pods ({json_bytes:,.0f} bytes of JSON each), {args.pods} pods:")
        for what, sizes in (("whole pod", whole), ("slim pod ", kept)):
            total = statistics.median(sizes) * args.pods / 2**20
            print(f"  {what} retained: {_spread(sizes)} bytes/pod, {total:.2f} MiB for {args.pods}")
        print(f"  transform: {_spread(cost, 1)} µs/pod")


if __name__ == "__main__":
    main()
