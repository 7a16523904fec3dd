"""A recording stand-in for kubectl, for deploy/uninstall.sh's tests: the suite's API server serves no
discovery, so a real kubectl cannot talk to it. Run as a script (`KUBECTL=<wrapper>`); it keeps a small
cluster in the JSON file `$STATE`, answers the reads uninstall.sh makes the way kubectl's jsonpath would
render them, applies its status merge patches, and logs every call (one line, its arguments) to `$LOG` and
what it read and wrote (JSON lines) to `$EVENTS`.

State keys: `nodes` and `pods` (API objects), `colo_pods_for` (how many polls still list a Colo pod),
`finish_after_read` (after each read of the pods, the first running pod named in it finishes).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
FINISHED = ("Succeeded", "Failed")


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def requests(container: dict[str, Any]) -> tuple[str, str]:
    got = (container.get("resources") or {}).get("requests") or {}
    return str(got.get(BATCH_CPU, "")), str(got.get(BATCH_MEMORY, ""))


def pod_line(pod: dict[str, Any]) -> str:
    """One pod as uninstall.sh's jsonpath renders it: -NODE, then kind=cpu=memory per container."""
    spec = pod.get("spec") or {}
    out = "-" + str(spec.get("nodeName") or "") + " "
    for c in spec.get("initContainers") or []:
        cpu, mem = requests(c)
        out += f"i{c.get('restartPolicy') or ''}={cpu}={mem} "
    for c in spec.get("containers") or []:
        cpu, mem = requests(c)
        out += f"c={cpu}={mem} "
    return out + "\n"


def node_batch_line(node: dict[str, Any]) -> str:
    status = node.get("status") or {}
    alloc, cap = status.get("allocatable") or {}, status.get("capacity") or {}
    values = [alloc.get(BATCH_CPU, ""), alloc.get(BATCH_MEMORY, ""), cap.get(BATCH_CPU, ""), cap.get(BATCH_MEMORY, "")]
    return f"{node['metadata']['name']} " + "=".join(str(v) for v in values) + "\n"


def main(argv: list[str]) -> int:
    state_path, events = Path(os.environ["STATE"]), Path(os.environ["EVENTS"])
    with open(os.environ["LOG"], "a", encoding="utf-8") as log:
        log.write(" ".join(argv) + "\n")
    state = json.loads(state_path.read_text(encoding="utf-8"))
    args = argv[2:] if argv[:1] == ["-n"] else argv
    said: list[dict[str, Any]] = []
    if args[:2] == ["get", "pods"] and "-l" in args:
        if state.get("colo_pods_for", 0) > 0:
            state["colo_pods_for"] -= 1
            sys.stdout.write("pod/colo-agent-abcde\n")
    elif args[:2] == ["get", "pods"]:
        running = [p for p in state["pods"] if (p.get("status") or {}).get("phase") not in FINISHED]
        sys.stdout.write("".join(pod_line(p) for p in running))
        said.append({"read": [p["metadata"]["name"] for p in running]})
        bound = [p for p in running if (p.get("spec") or {}).get("nodeName")]
        if state.get("finish_after_read") and bound:
            bound[0]["status"] = {"phase": "Succeeded"}
    elif args[:2] == ["get", "nodes"]:
        template = next((a for a in args if a.startswith("jsonpath=")), "")
        for node in state["nodes"]:
            if "taints" in template:
                taints = " ".join(t["key"] for t in (node.get("spec") or {}).get("taints") or [])
                sys.stdout.write(f"{node['metadata']['name']}={taints}\n")
            elif "batch-cpu" in template:
                sys.stdout.write(node_batch_line(node))
    elif args[:1] == ["patch"] and "--subresource=status" in args:
        name = args[1].split("/", 1)[1]
        body = json.loads(args[args.index("-p") + 1])
        for node in state["nodes"]:
            if node["metadata"]["name"] == name:
                node["status"] = merge(node.get("status") or {}, body["status"])
                said.append({"patch": name, "allocatable": node["status"].get("allocatable") or {}})
    state_path.write_text(json.dumps(state), encoding="utf-8")
    with events.open("a", encoding="utf-8") as out:
        out.writelines(json.dumps(e) + "\n" for e in said)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
