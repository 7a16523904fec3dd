"""The interference benchmark on a real node (issue 30, part 4): real pods scheduled by the kubelet, Colo
installed from deploy/.

bench/interference.py measures what colocation costs a latency-sensitive service in a kubepods-like tree it
builds itself, with the agent against the suite's API server. This driver asks the same question of a real
single-node cluster (the local Kubernetes of ../shared/realnode: kubelet, containerd, cgroupfs driver, cgroup
v1, its cgroup root `--cgroup-root`), with `colo-agent` running as the DaemonSet of deploy/. It is not part
of `make bench` (it needs that node); run it as root on the node:

    python -m bench.realnode_interference --kubeconfig $K8S/kubeconfig --exe /path/to/static/interference \\
        [--loads 0.3,0.6] [--reps 3] [--seconds 40] [--json out.json]

`--exe` is bench/interference.c built statically (`gcc -O2 -static -pthread -o interference
bench/interference.c -lm`); its directory is mounted read-only into the pods (hostPath), whose images have no
compiler. The pods (namespace `--namespace`, images `colo.local/busybox:1`, never pulled):

- the service: an online pod (Burstable, 1 CPU requested, no limit) running `interference server` with as
  many threads as the node has CPUs on 0.0.0.0 in its own network namespace, ~1 ms of fixed work per request
  (calibrated on the host: the same CPUs);
- for B-E the batch pods, created for the run and deleted after it: BestEffort with the label
  `koordinator.sh/qosClass: BE` (offline, docs/batch.md), one with as many busy threads as CPUs, one
  streaming through `--stream-mib` (512 MiB, more than the last-level cache).

The load generator runs on the host (clients off the node), open loop, Poisson, each request's latency
from its scheduled send time, to the service pod's IP. Each run: the load starts, after `--learn` seconds
(the agent sees the service quiet) the batch pods are created, and after `--settle` more seconds (creation
included) the measured `--seconds` begin. Configurations, interleaved with the order rotated by one per
repetition:

- A: the service alone (the agent as installed);
- B: + batch, Colo not enforcing: `enforcement.enabled: false` in the agent's ConfigMap, the agent's pod
  deleted so that the DaemonSet starts it with that file (its shutdown puts every cgroup back);
- C: + batch, Colo as installed (the ConfigMap's defaults);
- D: + batch, `enforcement.rq_protection.enabled: true` in the ConfigMap;
- E: C with a utilization rule that lends (`cpu_suppress_threshold: 0.95`) and `cpu.idle=1` on the BestEffort
  QoS tier, written by this driver for the run as kubelet would with the proposed CPU idle for BestEffort
  (kubernetes/enhancements#5889). Colo never writes the tier's `cpu.idle`: today's kubelet writes the tier's
  `cpu.shares` when it starts, the kernel refuses it on an idle group, and the kubelet exits ("Failed to start
  ContainerManager"; koordinator-sh/koordinator#2732 is the same failure). Its minute-by-minute rewrite fails
  meanwhile, and is logged;
- ED: E with the run-queue protection of D;
- DS: E's utilization rule and D's protection, the tier as kubelet leaves it, and the service's declared SLO:
  its pod annotated (`colo.io/slo-*`) for the run with the histogram its server exports and a p99 objective of
  `--slo-ratio` × the median p99 of the A runs at that load so far (the issue's goal); the protection judges it
  by its latency slack, as Heracles does;
- E0: the tier idle as in E, Colo not enforcing (as B): what the kernel does alone;
- S: Colo's cpuset policy (offline pods confined to ceil(budget) CPUs, the highest first), never released, at a
  threshold of 0.8 (the budget under one CPU of two at both loads): batch on CPU 1 of its own, the service free
  to use both, as Heracles gives best-effort work whole cores;
- F0 / F1, the physical floor: the service as a host process pinned to CPU 0 (no pod), alone, then beside a
  busy loop pinned to CPU 1, no cgroup contention (load relative to one CPU, as in bench/interference.py).

The agent's ConfigMap is changed only for B, D, E, ED, DS, E0 and S and put back, text unchanged, at the end.
Per run: p50 / p99 / p99.9, node CPU utilisation (/proc/stat), the service's and batch pods' CPU (cpuacct of their pod
cgroups under the node's cgroup root), batch CPU as a share of what the service leaves idle, the load
average before the run, and what the agent's `enforcement` section said (budget, release, run-queue
protection). kubectl is the door to the API server here: this is an operator's tool, not Colo's code.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from agent.sense.slo_scrape import p99_of_increase
from bench.interference import (
    SLO_METRIC,
    calibrate,
    cpu_times,
    protection_summary,
    quantile,
    schedule,
    service_histogram,
    slo_order_error,
    slo_seconds,
)
from bench.interference import summary as summarize
from contract.annotations import SLO_METRIC as SLO_METRIC_KEY
from contract.annotations import SLO_P99_SECONDS as SLO_P99_KEY
from contract.annotations import SLO_PORT as SLO_PORT_KEY

CONFIGS = ("A", "B", "C", "D", "E", "ED", "DS", "E0", "S", "F0", "F1")
BATCH = ("B", "C", "D", "E", "ED", "DS", "E0", "S")
#: configurations run with `cpu.idle=1` on the BestEffort QoS tier (E in the module's docstring: why Colo never does)
TIER_IDLE = ("E", "ED", "E0")
#: the agent's ConfigMap per configuration: keys under `enforcement` set on top of the installed file
#: (None: whatever the agent runs with at the time; the floor has no pods)
AGENT_MODE: dict[str, dict[str, Any] | None] = {
    "A": {},
    "B": {"enabled": False},
    "C": {},
    "D": {"rq_protection": {"enabled": True}},
    "E": {"cpu_suppress_threshold": 0.95},
    "ED": {"rq_protection": {"enabled": True}, "cpu_suppress_threshold": 0.95},
    "DS": {"rq_protection": {"enabled": True}, "cpu_suppress_threshold": 0.95},
    "E0": {"enabled": False},
    "S": {"cpu_policy": "cpuset", "cpu_suppress_threshold": 0.8, "cpu_release_below": 0},
    "F0": None,
    "F1": None,
}
SERVICE_PORT = 7000
FLOOR_PORT = 7001
CGROUP_V1 = "/sys/fs/cgroup"


@dataclass
class Run:
    config: str
    load: float
    rep: int
    requests: int
    lost: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    node_util: float
    service_cores: float
    batch_cores: float
    batch_share_of_idle: float
    loadavg_before: float
    batch_quota_us: list[int] = field(default_factory=list)
    protection: dict[str, Any] = field(default_factory=dict)
    colo_writes: int = 0
    own_p99_ms: float = float("nan")  # the p99 of the service's own histogram over the measured span


class Kube:
    """kubectl against the node's API server."""

    def __init__(self, kubeconfig: str) -> None:
        self.base = ["kubectl", "--kubeconfig", kubeconfig]

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        done = subprocess.run([*self.base, *args], input=stdin, capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def get(self, *args: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.run("get", *args, "-o", "json"))
        return doc

    def apply(self, obj: dict[str, Any]) -> None:
        self.run("apply", "-f", "-", stdin=json.dumps(obj))


def bench_pod(name: str, ns: str, exe_dir: str, argv: Sequence[str], online: bool) -> dict[str, Any]:
    """A pod running the static benchmark binary from the host directory `exe_dir`: online Burstable (1 CPU
    requested), or offline BestEffort with koordinator's BE label."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "colo.local/busybox:1",
        "imagePullPolicy": "Never",
        "command": [f"/bench/{os.path.basename(argv[0])}", *argv[1:]],
        "volumeMounts": [{"name": "bench", "mountPath": "/bench", "readOnly": True}],
    }
    labels = {"app": name}
    if online:
        container["resources"] = {"requests": {"cpu": "1", "memory": "64Mi"}}
    else:
        labels["koordinator.sh/qosClass"] = "BE"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "containers": [container],
            "volumes": [{"name": "bench", "hostPath": {"path": exe_dir, "type": "Directory"}}],
        },
    }


def pod_cgroup(root: str, pod: dict[str, Any]) -> str:
    """The pod's cgroup (cgroupfs driver) relative to a v1 controller's mount, under the node's cgroup root."""
    qos = pod["status"].get("qosClass", "BestEffort").lower()
    tier = "" if qos == "guaranteed" else qos + "/"
    return f"{root.rstrip('/')}/kubepods/{tier}pod{pod['metadata']['uid']}"


def cpuacct(rel: str) -> float:
    """Seconds of CPU the cgroup used (0 when it is gone)."""
    try:
        with open(f"{CGROUP_V1}/cpuacct/{rel.lstrip('/')}/cpuacct.usage") as f:
            return int(f.read()) / 1e9
    except OSError:
        return 0.0


def quota(rel: str) -> int:
    try:
        with open(f"{CGROUP_V1}/cpu/{rel.lstrip('/')}/cpu.cfs_quota_us") as f:
            return int(f.read())
    except OSError:
        return 0


def agent_node(url: str) -> dict[str, Any]:
    """The agent's /api/v1/node (an open path; its certificate is the pod's own, not checked here)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(url + "/api/v1/node", timeout=5, context=ctx) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


class Node:
    """The service pod, the agent's configuration and the batch pods of the real node."""

    def __init__(self, kube: Kube, args: argparse.Namespace, iters: int) -> None:
        self.kube, self.args, self.iters = kube, args, iters
        self.ns, self.ncpu = args.namespace, os.cpu_count() or 1
        self.exe_dir = os.path.dirname(os.path.abspath(args.exe))
        self.mode: str | None = None
        cm = kube.get("-n", args.agent_namespace, "configmap", "colo-agent")
        self.original_config: str = cm["data"]["config.yaml"]
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}})
        server = [args.exe, "server", str(SERVICE_PORT), str(self.ncpu), str(iters), "0.0.0.0"]
        kube.apply(bench_pod("service", self.ns, self.exe_dir, server, online=True))
        self.service = self.wait_running("service")
        self.service_ip: str = self.service["status"]["podIP"]
        self.service_cg = pod_cgroup(args.cgroup_root, self.service)

    def wait_running(self, name: str, timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pod = self.kube.get("-n", self.ns, "pod", name)
            statuses = pod["status"].get("containerStatuses") or []
            if statuses and all(s.get("state", {}).get("running") for s in statuses) and pod["status"].get("podIP"):
                return pod
            time.sleep(0.5)
        raise RuntimeError(f"pod {name} not running after {timeout:.0f} s")

    def set_agent(self, config: str) -> None:
        """The agent's ConfigMap as `config` needs it; on a change the agent's pod is deleted and the new one
        awaited (Ready, then a few passes)."""
        mode = AGENT_MODE[config]
        if mode is None or self.mode == json.dumps(mode, sort_keys=True):
            return
        self._write_config(mode)
        self.mode = json.dumps(mode, sort_keys=True)

    def _write_config(self, mode: dict[str, Any] | None) -> None:
        ns = self.args.agent_namespace
        text = self.original_config  # the installed file, as it was
        if mode:
            doc = yaml.safe_load(self.original_config)
            merge(doc.setdefault("enforcement", {}), mode)
            text = yaml.safe_dump(doc, sort_keys=False)
        patch = {"data": {"config.yaml": text}}
        self.kube.run("patch", "-n", ns, "configmap", "colo-agent", "--type=merge", "-p", json.dumps(patch))
        self.kube.run("delete", "-n", ns, "pod", "-l", "app.kubernetes.io/name=colo-agent", "--wait=true")
        self.kube.run("rollout", "status", "-n", ns, "daemonset/colo-agent", "--timeout=180s")
        self.kube.run("wait", "-n", ns, "pod", "-l", "app.kubernetes.io/name=colo-agent",
                      "--for=condition=Ready", "--timeout=180s")  # fmt: skip
        time.sleep(self.args.agent_warmup)

    def restore_agent(self) -> None:
        """The installed ConfigMap back (and the agent restarted with it) if a run changed it."""
        if self.mode is not None and self.mode != json.dumps({}):
            self._write_config(None)
        self.mode = None

    @contextlib.contextmanager
    def batch(self) -> Iterator[list[str]]:
        """The batch pods, created now and deleted after; yields their cgroups once they run."""
        burn = [self.args.exe, "burn", str(self.ncpu)]
        stream = [self.args.exe, "stream", str(self.args.stream_mib)]
        names = ("batch-burn", "batch-stream")
        try:
            for name, argv in zip(names, (burn, stream), strict=True):
                self.kube.apply(bench_pod(name, self.ns, self.exe_dir, argv, online=False))
            yield [pod_cgroup(self.args.cgroup_root, self.wait_running(n)) for n in names]
        finally:
            self.kube.run("delete", "-n", self.ns, "pod", *names, "--ignore-not-found", "--wait=true")

    @contextlib.contextmanager
    def tier_idle(self) -> Iterator[None]:
        """`cpu.idle=1` on the BestEffort tier while the run lasts (kubelet's minute write of the tier's
        cpu.shares fails meanwhile, and is logged)."""
        path = f"{CGROUP_V1}/cpu/{self.args.cgroup_root.strip('/')}/kubepods/besteffort/cpu.idle"
        with open(path, "w") as f:
            f.write("1")
        try:
            yield
        finally:
            with open(path, "w") as f:
                f.write("0")

    @contextlib.contextmanager
    def floor(self, busy: bool) -> Iterator[None]:
        """The service as a host process on CPU 0 (port FLOOR_PORT, loopback); with `busy`, a busy loop on the
        last CPU. No pod, no cgroup contention."""

        def pin(cpu: int) -> Any:
            return lambda: os.sched_setaffinity(0, {cpu})

        argv = [self.args.exe, "server", str(FLOOR_PORT), "1", str(self.iters)]
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, preexec_fn=pin(0))]
        if busy:
            procs.append(subprocess.Popen([self.args.exe, "burn", "1"], stdout=subprocess.PIPE,
                                          preexec_fn=pin(self.ncpu - 1)))  # fmt: skip
        try:
            for p in procs:
                assert p.stdout is not None
                p.stdout.readline()  # "ready"
            yield
        finally:
            for p in procs:
                p.terminate()
                p.wait(10)

    @contextlib.contextmanager
    def slo(self, p99_seconds: float) -> Iterator[None]:
        """The service's pod declares its SLO while inside (the histogram its server exports on its port)."""
        keys = (SLO_METRIC_KEY, SLO_P99_KEY, SLO_PORT_KEY)
        values = (SLO_METRIC, f"{p99_seconds:.6f}", str(SERVICE_PORT))
        self.kube.run("annotate", "-n", self.ns, "pod", "service", "--overwrite",
                      *(f"{k}={v}" for k, v in zip(keys, values, strict=True)))  # fmt: skip
        try:
            yield
        finally:
            self.kube.run("annotate", "-n", self.ns, "pod", "service", *(f"{k}-" for k in keys))

    def close(self) -> None:
        self.kube.run("delete", "namespace", self.ns, "--ignore-not-found", "--wait=true", check=False)
        self.restore_agent()


def merge(into: dict[str, Any], changes: dict[str, Any]) -> None:
    for k, v in changes.items():
        if isinstance(v, dict):
            merge(into.setdefault(k, {}), v)
        else:
            into[k] = v


def measure(n: Node, config: str, load: float, rep: int, slo_s: float | None = None) -> Run:
    """One run: the agent configured, the load started, the batch pods after `learn` seconds, the measured
    window after `settle` more. `slo_s`: the p99 objective the service declares in DS."""
    a = n.args
    floor = config.startswith("F")
    rate = load * (1 if floor else n.ncpu) * 1e6 / a.service_us  # requests a second
    n.set_agent(config)
    loadavg = os.getloadavg()[0]
    polls: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack, tempfile.NamedTemporaryFile(suffix=".lat") as out:
        if floor:
            stack.enter_context(n.floor(config == "F1"))
        if config == "DS":
            if slo_s is None:
                raise ValueError("DS needs the service's SLO")
            stack.enter_context(n.slo(slo_s))
        target, port = ("127.0.0.1", FLOOR_PORT) if floor else (n.service_ip, SERVICE_PORT)
        t_load = time.monotonic() + 0.5
        start_ns = time.time_ns() + 500_000_000
        total = a.learn + a.settle + a.seconds
        argv = [a.exe, "loadgen", str(port), f"{rate:.3f}", str(total), str(1000 * rep + 7), out.name,
                str(a.learn + a.settle), str(start_ns), target]  # fmt: skip
        gen = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        time.sleep(max(0.0, t_load + a.learn - time.monotonic()))
        if config in TIER_IDLE:
            stack.enter_context(n.tier_idle())
        batch_cgs: list[str] = stack.enter_context(n.batch()) if config in BATCH else []
        if time.monotonic() > t_load + a.learn + a.settle:
            print(f"  {config} rep {rep}: the batch pods took longer than --settle to run", file=sys.stderr)
        time.sleep(max(0.0, t_load + a.learn + a.settle + 0.02 - time.monotonic()))
        busy0, total0 = cpu_times()
        svc0, batch0, t0 = cpuacct(n.service_cg), sum(cpuacct(c) for c in batch_cgs), time.monotonic()
        own0 = None if floor else service_histogram(n.service_ip, SERVICE_PORT)
        while time.monotonic() < t_load + total:
            if not floor:
                with contextlib.suppress(OSError, ValueError):
                    polls.append(agent_node(a.agent_url).get("enforcement") or {})
            time.sleep(max(0.0, min(1.0, t_load + total + 0.02 - time.monotonic())))
        elapsed = time.monotonic() - t0
        busy1, total1 = cpu_times()
        svc1, batch1 = cpuacct(n.service_cg), sum(cpuacct(c) for c in batch_cgs)
        own1 = None if floor else service_histogram(n.service_ip, SERVICE_PORT)
        quotas = [quota(c) for c in batch_cgs]
        if gen.wait(60) != 0:
            raise RuntimeError(f"loadgen exited with {gen.returncode}")
        raw = array.array("q")
        raw.frombytes(out.read())
    service = 0.0 if floor else (svc1 - svc0) / elapsed
    batch = (batch1 - batch0) / elapsed
    ordered = sorted(x / 1e6 for x in raw if x >= 0)
    lost = sum(1 for x in raw if x < 0)
    ordered += [float("inf")] * lost
    own = p99_of_increase(own0, own1) if own0 is not None and own1 is not None else None
    return Run(config, load, rep, len(raw), lost, quantile(ordered, 0.5), quantile(ordered, 0.99),
               quantile(ordered, 0.999), (busy1 - busy0) / ((total1 - total0) or 1e-9), service, batch,
               batch / max(n.ncpu - service, 1e-9) if config in BATCH else float("nan"), loadavg, quotas,
               protection_summary(polls) if polls else {},
               int(polls[-1].get("writes", 0)) if polls else 0,
               float("nan") if own is None else 1000 * own)  # fmt: skip


def summary(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per (load, config): median, min and max over the repetitions; latency ratios to A's (F1: to F0's)."""
    keys = ("p50_ms", "p99_ms", "p999_ms", "node_util", "service_cores", "batch_cores", "batch_share_of_idle",
            "loadavg_before", "own_p99_ms")  # fmt: skip
    return summarize(runs, keys, CONFIGS)


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    def f(t: tuple[float, float, float], scale: float = 1.0, digits: int = 2) -> str:
        m, lo, hi = (x * scale for x in t)
        return "-" if m != m else f"{m:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"

    print("| load | config | p50 ms | p99 ms | p99.9 ms | ratio p50/p99/p99.9 | batch cores | of the idle "
          "| node util | load avg | own p99 ms |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = r.get("ratio") or {}
        rs = " / ".join(f"{ratio[k]:.2f}" for k in ("p50_ms", "p99_ms", "p999_ms")) if ratio else "-"
        print(f"| {r['load']:.0%} | {r['config']} | {f(r['p50_ms'])} | {f(r['p99_ms'], digits=1)} | "
              f"{f(r['p999_ms'], digits=1)} | {rs} | {f(r['batch_cores'])} | {f(r['batch_share_of_idle'], 100, 0)}% "
              f"| {f(r['node_util'], 100, 0)}% | {f(r['loadavg_before'], digits=1)} | "
              f"{f(r['own_p99_ms'], digits=1)} |")  # fmt: skip


def main() -> None:
    k8s = os.environ.get("K8S", "/work/local-k8s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--kubeconfig", default=os.path.join(k8s, "kubeconfig"))
    ap.add_argument("--exe", required=True, help="bench/interference.c built statically (its directory is mounted)")
    ap.add_argument("--cgroup-root", default="/local-k8s", help="kubelet's --cgroup-root")
    ap.add_argument("--agent-namespace", default="colo-system")
    ap.add_argument("--agent-url", default="https://127.0.0.1:9817", help="the agent (hostNetwork) on this node")
    ap.add_argument("--agent-warmup", type=float, default=5.0, help="seconds after a restarted agent is Ready")
    ap.add_argument("--namespace", default="colo-bench", help="where the benchmark's pods run (deleted at the end)")
    ap.add_argument("--loads", default="0.3,0.6")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=40.0, help="measured load per run")
    ap.add_argument("--learn", type=float, default=10.0, help="the service alone under load before batch starts")
    ap.add_argument("--settle", type=float, default=12.0, help="after the batch pods are created, not measured")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--service-us", type=float, default=1000.0)
    ap.add_argument("--stream-mib", type=int, default=512)
    ap.add_argument("--slo-ratio", type=float, default=1.2, help="DS: the p99 objective as a ratio to A's p99")
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args()
    # SIGTERM runs the cleanup too (the cgroup tree, the agent's configuration): as an exception, not a kill
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    configs = [c for c in args.configs.split(",") if c]
    if os.geteuid() != 0 or not shutil.which("kubectl") or not os.access(args.exe, os.X_OK):
        print("realnode_interference: needs root, kubectl and an executable --exe", file=sys.stderr)
        sys.exit(2)
    if any(c not in CONFIGS for c in configs):
        print(f"realnode_interference: --configs takes {','.join(CONFIGS)}", file=sys.stderr)
        sys.exit(2)
    if (why := slo_order_error(configs)) is not None:
        print(f"realnode_interference: {why}", file=sys.stderr)
        sys.exit(2)
    loads = [float(x) for x in args.loads.split(",")]
    iters = calibrate(args.exe, args.service_us)
    n = Node(Kube(args.kubeconfig), args, iters)
    runs: list[Run] = []
    try:
        for config, load, rep in schedule(configs, loads, args.reps, n.ncpu):
            r = measure(n, config, load, rep, slo_seconds(runs, load, args.slo_ratio))
            runs.append(r)
            print(f"  {config:<2} load {load:.0%} rep {rep}: p50 {r.p50_ms:.2f} p99 {r.p99_ms:.2f} p99.9 "
                  f"{r.p999_ms:.2f} ms, batch {r.batch_cores:.2f} cores, node {r.node_util:.0%}, load avg "
                  f"{r.loadavg_before:.1f}, quotas {r.batch_quota_us}, {json.dumps(r.protection)}",
                  flush=True)  # fmt: skip
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"iters": iters, "runs": [asdict(x) for x in runs]}, f, default=str)
    finally:
        n.close()
    rows = summary(runs)
    print(f"realnode_interference: {n.ncpu} CPUs, {iters} rounds = {args.service_us:.0f} us per request, "
          f"{args.seconds:.0f} s per run")  # fmt: skip
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"iters": iters, "runs": [asdict(x) for x in runs], "summary": rows}, f, default=str)


if __name__ == "__main__":
    main()
