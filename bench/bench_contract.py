"""How long the controller takes to validate one agent's answer: the contract's parse of the agent's real
`/api/v1/node` document (testsupport.agent_document), as `controller.poller.parse_sample` does it per agent and
cycle (5000 agents: 5000 parses a cycle), and of a `/api/v1/pods` document.

    python -m bench.bench_contract [--rounds 15] [--per-round 2000]

Figures are CPU time of this process per parse (median, p10 and p90 over the rounds), so that other
processes on a busy machine change them less than wall time would.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from contract.agent_api import parse_pods_document
from controller.policy import AGENT_WINDOWS
from controller.poller import parse_sample
from testsupport.agent_document import real_node_document, real_pods_document


def per_call_us(fn: Callable[[], object], rounds: int, per_round: int) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(per_round):
            fn()
        out.append((time.process_time() - start) / per_round * 1e6)
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_contract")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--per-round", type=int, default=2000)
    args = p.parse_args(argv)
    node = json.dumps(real_node_document("node-a", 0.3)).encode()
    pods = json.dumps(real_pods_document()).encode()
    wanted = sorted(AGENT_WINDOWS)
    cases: dict[str, tuple[Callable[[], object], int]] = {
        "node_document": (lambda: parse_sample("node-a", node, wanted, 0.0), len(node)),
        "pods_document_2_pods": (lambda: parse_pods_document(pods), len(pods)),
    }
    for name, (fn, size) in cases.items():
        runs = per_call_us(fn, args.rounds, args.per_round)
        p10, p90 = runs[len(runs) // 10], runs[(len(runs) * 9) // 10]
        print(f"  {name:<24} {size:>6} bytes  median {statistics.median(runs):7.1f} us  p10 {p10:7.1f}  p90 {p90:7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
