"""What colocation costs a latency-sensitive service (issue 30): real cgroups, real processes, the real agent.

A kubepods-like tree on the real v1 hierarchy (testsupport/cgtree.py, with kubelet's `cpu.shares`: the root
allocatable × 1024, the burstable tier the sum of its requests, best-effort pods and tier 2) holds:

- an online pod (Burstable, 1 CPU requested) running a UDP server whose requests each do ~1 ms of fixed work
  (a chain of lookups in a 1 MiB table, calibrated on this CPU at start: the minimum of many trials), with as
  many worker threads as the node has CPUs;
- for (B)-(D) two offline pods (BestEffort, `spec.priority` -10): one with as many busy threads as CPUs, one
  streaming through a buffer larger than the last-level cache (`--stream-mib`, default 512 MiB: the VM reports
  a 480 MiB L3).

The load generator runs outside the pods: open loop, Poisson arrivals at `load` × CPUs / service time
requests a second, each request's latency measured from its *scheduled* send time (a late send counts:
no coordinated omission), replies timestamped by the kernel (SO_TIMESTAMPNS); it runs SCHED_FIFO because it
stands for clients on other machines. Server, generator and antagonists are C (bench/interference.c,
compiled here with gcc): an interpreter's own pauses would sit in the very tail measured.

Configurations, interleaved (their order rotates from one repetition to the next), each `--reps` times:

- A: the service alone;
- B: + batch as kubelet leaves it (BestEffort, cpu.shares 2), no agent;
- C: + batch, `colo-agent` enforcing with its defaults, in cluster mode against the suite's fake API server
  (the pods as a node's API server lists them; the agent started for the run and stopped after it, which
  puts every cgroup back);
- D: the same with the run-queue protection (`enforcement.rq_protection`, agent/enforce/strategies/);
- DS: D2 (below) with the service's declared SLO (`colo.io/slo-*`): the server exports its own latency
  histogram, and its p99 objective is `--slo-ratio` × the median p99 of the A runs at that load so far, the
  goal the issue sets; the protection judges the service by its slack, as Heracles does;
- F0 / F1, the physical floor (at loads that fit on one CPU): the service pinned to CPU 0 alone, then beside a
  busy loop pinned to the other CPU outside every pod cgroup (no cgroup contention at all).

Per run: p50/p99/p99.9 latency, node CPU utilisation (/proc/stat), the service's, batch's, agent's and
everyone else's CPU (this machine is shared), batch work (busy-loop rounds, bytes streamed, CPU-seconds) and
its share of the CPU the service left idle, Colo's cgroup writes (`enforcement.writes` of /api/v1/node). The
table shows the median and the spread (min-max) over repetitions and each median's ratio to A's;
`--plot` draws the latency CDFs and batch CPU against p99 (docs/interference.png).

Run as root: `.venv/bin/python -m bench.interference [--loads 0.3,0.6] [--reps 3] [--seconds 20] [--plot PATH]`;
`--quick` (one repetition of 2 s at 30%) checks the harness, `--json PATH` writes every run's figures.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agent.sense.slo_scrape import SloSpec, fetch, p99_of_increase, parse_buckets
from bench.agent_overhead import free_port, wait_ready
from contract.annotations import SLO_METRIC as SLO_METRIC_KEY
from contract.annotations import SLO_P99_SECONDS as SLO_P99_KEY
from contract.annotations import SLO_PORT as SLO_PORT_KEY
from testsupport.cgtree import V1Tree
from testsupport.k8sobjects import NODE, container_id_of, node, pod

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "interference.c")
CONFIGS = ("A", "B", "C", "D", "C2", "D2", "DS", "E", "ED", "S", "F0", "F1")
BATCH = ("B", "C", "D", "C2", "D2", "DS", "E", "ED", "S")  # the configurations with the batch pods
AGENT = ("C", "D", "C2", "D2", "DS", "E", "ED", "S")  # ... and those with the agent
PROTECTED = ("D", "D2", "DS", "ED")  # ... with the run-queue protection
LENDS = ("C2", "D2", "DS", "E", "ED")  # ... with a utilization rule that lends (see LENDING_ENV)
#: the service's own histogram (bench/interference.c's server), named in its SLO annotations in DS
SLO_METRIC = "colo_bench_request_duration_seconds"
#: with `cpu.idle=1` on the BestEffort QoS tier, written by the benchmark as kubelet would with the proposed CPU
#: idle for BestEffort (kubernetes/enhancements#5889); Colo never writes it: today's kubelet then fails to start
TIER_IDLE = ("E", "ED")
DESCRIBED = {
    "A": "service alone",
    "B": "+ batch, no agent (BestEffort, shares 2)",
    "C": "+ batch, Colo's defaults",
    "D": "+ batch, Colo + run-queue protection",
    "F0": "floor: service on CPU 0 alone",
    "C2": "+ batch, Colo's defaults, a utilization rule that lends (see LENDING)",
    "D2": "+ batch, Colo + run-queue protection, a utilization rule that lends",
    "DS": "D2 with the service's declared SLO (p99 <= --slo-ratio x A's): judged by its latency slack",
    "E": "C2 with the BestEffort tier idle (cpu.idle=1, as kubelet's proposed gate sets it)",
    "ED": "D2 with the BestEffort tier idle",
    "S": "+ batch, Colo's cpuset policy: offline pods on CPUs of their own (see ISOLATION_ENV)",
    "F1": "floor: + busy loop on CPU 1, no cgroup",
}
#: what (D) switches on, as the agent's environment (COLO_<KEY>, nested keys joined by '__')
PROTECTION_ENV = {"COLO_ENFORCEMENT__RQ_PROTECTION__ENABLED": "true"}
#: both agent runs: no kubelet acts on an eviction here (the processes would run on, out of the agent's view),
#: and this shared machine's other tenants alone can hold it above the watermark; suppression is compared
AGENT_ENV = {"COLO_ENFORCEMENT__EVICTION__ENABLED": "false"}
#: C2 and D2: the utilization rule as it sees a node that is mostly idle (the issue's real node: "the budget
#: lends everything"). On this shared machine other people's processes count as system usage and hold the
#: budget at its floor; for C2/D2 the Node declares twice the CPUs allocatable and the threshold is 1, so the
#: budget (2 x CPUs - online - system) lends what the others do not use, and only the run-queue protection
#: can take CPU back for the service.
LENDING_ENV = {"COLO_ENFORCEMENT__CPU_SUPPRESS_THRESHOLD": "1.0"}
#: S: the cpuset policy (offline pods confined to ceil(budget) CPUs, the highest first), never released, at a
#: threshold that sizes the budget under one CPU of two at both loads (2 × 0.8 − online − system): batch on
#: CPU 1, the service free to use both, as Heracles gives best-effort work whole cores
ISOLATION_ENV = {
    "COLO_ENFORCEMENT__CPU_POLICY": "cpuset",
    "COLO_ENFORCEMENT__CPU_SUPPRESS_THRESHOLD": "0.8",
    "COLO_ENFORCEMENT__CPU_RELEASE_BELOW": "0",
}


def service_histogram(ip: str, port: int) -> dict[float, float] | None:
    """The service's own latency histogram at ip:port (cumulative counts by bound), None when it cannot be read."""
    try:
        return parse_buckets(fetch(ip, SloSpec(SLO_METRIC, 1.0, port), 2.0), SLO_METRIC)
    except (OSError, ValueError):
        return None


def slo_order_error(configs: Sequence[str]) -> str | None:
    """Why `configs` cannot run DS (its objective is relative to A's p99), None when they can."""
    if "DS" in configs and ("A" not in configs or configs.index("A") > configs.index("DS")):
        return "DS declares an SLO relative to A's p99: list A before DS in --configs"
    return None


def slo_seconds(runs: Sequence[Any], load: float, ratio: float) -> float | None:
    """DS's p99 objective at `load`: `ratio` × the median p99 of the A runs there so far (None before any)."""
    alone = [r.p99_ms for r in runs if r.config == "A" and r.load == load and r.p99_ms != float("inf")]
    return ratio * statistics.median(alone) / 1000 if alone else None


def compile_programs(workdir: str) -> str:
    """bench/interference.c built with gcc -O2 into `workdir`; the binary's path."""
    exe = os.path.join(workdir, "interference")
    subprocess.run(["gcc", "-O2", "-pthread", "-o", exe, SOURCE, "-lm"], check=True)
    return exe


def calibrate(exe: str, micros: float) -> int:
    """Loop rounds for `micros` of work: the median of five calibrations, each the fastest of 60 trials (a busy
    machine only ever slows a trial down)."""
    runs = [
        int(subprocess.run([exe, "calibrate", str(micros)], capture_output=True, check=True).stdout) for _ in range(5)
    ]
    return int(statistics.median(runs))


def cpu_times() -> tuple[float, float]:
    """(busy, total) seconds of all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / tick, sum(fields) / tick


def process_cpu(pid: int) -> float:
    """utime + stime of a process and its threads, seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


class Node:
    """The tree, the service and the API server's view of the pods; runs antagonists and the agent on demand."""

    def __init__(self, exe: str, iters: int, stream_mib: int, kubepods_shares: int | None = None) -> None:
        self.exe, self.iters, self.stream_mib = exe, iters, stream_mib
        self.ncpu = os.cpu_count() or 1
        self.tree = V1Tree("cgroupfs")
        t = self.tree
        self.online_uid, self.online_pod, (self.online_ctr,) = t.pod("burstable")
        self.burn_uid, self.burn_pod, (self.burn_ctr,) = t.pod("besteffort")
        self.stream_uid, self.stream_pod, (self.stream_ctr,) = t.pod("besteffort")
        # the agent runs in its own pod, as the DaemonSet's (Burstable: 50m requested, 500m limit)
        self.agent_uid, self.agent_pod, (self.agent_ctr,) = t.pod("burstable")
        m = t.model
        root = kubepods_shares or 1024 * self.ncpu
        # the tree's own top cgroup stands where the node's root is: it competes with this machine's other
        # processes with the same weight as kubepods
        for cg, shares in ((t.cgroup_root, root), (m.kubepods(), root), (m.tier("burstable"), 1024 + 51),
                           (self.online_pod, 1024), (self.online_ctr, 1024), (self.agent_pod, 51), (self.agent_ctr, 51),
                           (m.tier("besteffort"), 2), (self.burn_pod, 2),
                           (self.burn_ctr, 2), (self.stream_pod, 2), (self.stream_ctr, 2)):  # fmt: skip
            t.write("cpu", cg, "cpu.shares", str(shares))
        self.port = free_port()
        self.server = self.start_in(self.online_ctr, ["server", str(self.port), str(self.ncpu), str(iters)])
        self._ready(self.server)
        from testsupport.kubeapi.server import FakeKubeAPI

        self.api = FakeKubeAPI().start()
        self.api.put("nodes", node(cpu=str(self.ncpu), memory="16Gi"))
        self.declare_slo(None)
        for cg in (self.agent_pod, self.agent_ctr):
            t.write("cpu", cg, "cpu.cfs_quota_us", "50000")
        agent = [container_id_of(self.agent_ctr)]
        self.api.put("pods", pod("colo-agent", self.agent_uid, qos="Burstable", container_ids=agent, cpu_request="50m",
                                 cpu_limit="500m", memory_request="96Mi", priority=0))  # fmt: skip
        for name, uid, ctr in (("batch-burn", self.burn_uid, self.burn_ctr),
                               ("batch-stream", self.stream_uid, self.stream_ctr)):  # fmt: skip
            self.api.put("pods", pod(name, uid, qos="BestEffort", container_ids=[container_id_of(ctr)], priority=-10))

    def declare_slo(self, p99_seconds: float | None) -> None:
        """The service's pod as the API server lists it: with its SLO declared (DS) or none; its IP is this
        machine's loopback, where its server listens."""
        annotations = (
            {}
            if p99_seconds is None
            else {SLO_METRIC_KEY: SLO_METRIC, SLO_P99_KEY: f"{p99_seconds:.6f}", SLO_PORT_KEY: str(self.port)}
        )
        service = pod("service", self.online_uid, qos="Burstable", container_ids=[container_id_of(self.online_ctr)],
                      cpu_request="1", memory_request="64Mi", priority=0, annotations=annotations)  # fmt: skip
        service["status"]["podIP"] = "127.0.0.1"
        self.api.put("pods", service)

    def start_in(
        self, cgroup: str | None, argv: Sequence[str], cpus: set[int] | None = None
    ) -> subprocess.Popen[bytes]:
        """The C program with `argv`, in `cgroup` (every controller; None: where this process is), on `cpus`."""
        files = (
            []
            if cgroup is None
            else [f"{self.tree.layout.dir(c, cgroup)}/cgroup.procs" for c in self.tree.controllers()]
        )

        def enter() -> None:
            for f in files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))
            if cpus is not None:
                os.sched_setaffinity(0, cpus)

        proc = subprocess.Popen([self.exe, *argv], preexec_fn=enter, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.tree.procs.append(proc)
        return proc

    @staticmethod
    def _ready(proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line != b"ready\n":
            raise RuntimeError(f"{proc.args!r} did not start: {line!r}")

    def pin_server(self, cpus: set[int]) -> None:
        for tid in os.listdir(f"/proc/{self.server.pid}/task"):
            os.sched_setaffinity(int(tid), cpus)

    def cpuacct(self, cgroup: str) -> float:
        with open(f"{self.tree.layout.dir('cpuacct', cgroup)}/cpuacct.usage") as f:
            return int(f.read()) / 1e9

    def quota(self, cgroup: str) -> int:
        with open(f"{self.tree.layout.dir('cpu', cgroup)}/cpu.cfs_quota_us") as f:
            return int(f.read())

    @contextlib.contextmanager
    def batch(self) -> Iterator[list[subprocess.Popen[bytes]]]:
        """Both antagonists in their offline pods while inside; their work is read after SIGTERM."""
        procs = [self.start_in(self.burn_ctr, ["burn", str(self.ncpu)]),
                 self.start_in(self.stream_ctr, ["stream", str(self.stream_mib)])]  # fmt: skip
        for p in procs:
            self._ready(p)
        yield procs

    @contextlib.contextmanager
    def floor_loop(self) -> Iterator[list[subprocess.Popen[bytes]]]:
        """A busy loop pinned to the last CPU, outside every pod cgroup; the server pinned to CPU 0."""
        self.pin_server({0})
        proc = self.start_in(None, ["burn", "1"], cpus={self.ncpu - 1})
        self._ready(proc)
        try:
            yield [proc]
        finally:
            self.pin_server(set(range(self.ncpu)))

    def tier_idle_value(self) -> str:
        """The BestEffort tier's `cpu.idle` as the kernel has it."""
        with open(f"{self.tree.layout.dir('cpu', self.tree.model.tier('besteffort'))}/cpu.idle") as f:
            return f.read().strip()

    @contextlib.contextmanager
    def tier_idle(self) -> Iterator[None]:
        """`cpu.idle=1` on the BestEffort tier while inside."""
        tier = self.tree.model.tier("besteffort")
        self.tree.write("cpu", tier, "cpu.idle", "1")
        try:
            yield
        finally:
            self.tree.write("cpu", tier, "cpu.idle", "0")

    @contextlib.contextmanager
    def allocatable(self, cpus: int) -> Iterator[None]:
        """The Node declares `cpus` allocatable while inside."""
        self.api.put("nodes", node(cpu=str(cpus), memory="16Gi"))
        try:
            yield
        finally:
            self.api.put("nodes", node(cpu=str(self.ncpu), memory="16Gi"))

    @contextlib.contextmanager
    def agent(self, extra_env: dict[str, str]) -> Iterator[tuple[int, str]]:
        """`colo-agent` as on a node (a kubeconfig, the node's name, 1 s), ready; stopped (and every cgroup put
        back) on leaving."""
        port = free_port()
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = self.api.kubeconfig(os.path.join(tmp, "kubeconfig"))
            cmd = [sys.executable, "-c", "from colo_agent.main import main; main()", "--kubeconfig", kubeconfig,
                   "--node-name", NODE, "--listen", f"127.0.0.1:{port}", "--interval", "1", "--cgroup-root",
                   self.tree.cgroup_root, "--cgroup-driver", "cgroupfs", "--state-file", "", "--log-level",
                   "warning"]  # fmt: skip
            ledger = os.path.join(tmp, "ledger.json")
            # POD_UID: the agent's own pod, as the DaemonSet's downward API names it (no strategy judges it)
            env = {**os.environ, **extra_env, "COLO_ENFORCEMENT__LEDGER_FILE": ledger, "POD_UID": self.agent_uid}
            files = [f"{self.tree.layout.dir(c, self.agent_ctr)}/cgroup.procs" for c in self.tree.controllers()]

            def enter() -> None:
                for f in files:
                    with open(f, "w") as fh:
                        fh.write(str(os.getpid()))

            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env, preexec_fn=enter)
            base = f"http://127.0.0.1:{port}"
            try:
                wait_ready(base, 60)
                if proc.poll() is not None:
                    raise RuntimeError(f"colo-agent exited with {proc.returncode}")
                yield proc.pid, base
            finally:
                proc.terminate()
                proc.wait(30)

    def close(self) -> None:
        self.api.stop()
        self.tree.cleanup()


class Poller:
    """The agent's `enforcement` section once a second while the load runs, into `into`."""

    def __init__(self, base: str, into: list[dict[str, Any]]) -> None:
        self.base, self.into, self.done = base, into, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError):
                self.into.append(enforcement(self.base))
            if self.done.wait(1.0):
                return

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)


def protection_summary(polls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What enforcement held the batch pods to during a run: the budget's median and range, and the run-queue
    protection's states (share of polls in each) and its last reason."""
    budgets = [p["offline_cpu_budget_cores"] for p in polls if p.get("offline_cpu_budget_cores") is not None]
    guard = [p.get("run_queue_guard") or {} for p in polls]
    states: dict[str, float] = {}
    for g in guard:
        if g:
            states[g["state"]] = states.get(g["state"], 0.0) + 1 / len(guard)
    released = sum(bool(p.get("offline_cpu_released")) for p in polls) / max(1, len(polls))
    out: dict[str, Any] = {"polls": len(polls), "released_share": released}
    if budgets:
        out["budget_cores"] = (statistics.median(budgets), min(budgets), max(budgets))
    cpusets = sorted({p["offline_cpuset"] for p in polls if p.get("offline_cpuset")})
    if cpusets:
        out["cpusets"] = cpusets  # the cpuset policy's (S): the CPUs the offline pods were confined to
    slack = [pod["slo_slack"] for g in guard for pod in (g.get("pods") or {}).values() if "slo_slack" in pod]
    if slack:  # DS: the service's slack as the agent judged it, (SLO - p99) / SLO, over the polls that had one
        out["slo_slack"] = (statistics.median(slack), min(slack), max(slack))
        out["slo_polls"] = len(slack)
    if states:
        out["guard_states"] = {k: round(v, 2) for k, v in sorted(states.items())}
        out["last_reason"] = next((g["reason"] for g in reversed(guard) if g), "")
    return out


def enforcement(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(base + "/api/v1/node", timeout=5) as r:
        doc: dict[str, Any] = json.loads(r.read())
    section: dict[str, Any] = doc.get("enforcement") or {}
    return section


def stop(procs: Sequence[subprocess.Popen[bytes]]) -> list[int]:
    """SIGTERM the antagonists; what each printed it did."""
    for p in procs:
        p.terminate()
    done = []
    for p in procs:
        out, _ = p.communicate(timeout=30)
        lines = out.split()
        done.append(int(lines[-1]) if lines else 0)
    return done


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
    node_util: float  # share of all CPUs busy
    service_cores: float
    batch_cores: float
    agent_cores: float
    others_cores: float  # everything else on this shared machine
    batch_share_of_idle: float  # batch CPU / (CPUs x time - service CPU)
    burn_rounds_per_s: float
    stream_gib_per_s: float
    colo_writes: int
    own_p99_ms: float  # the p99 of the service's own histogram over the measured span (from each arrival): nan if none
    protection: dict[str, Any] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list, repr=False)


def quantile(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def measure(
    n: Node,
    config: str,
    load: float,
    rep: int,
    seconds: float,
    settle: float,
    learn: float,
    service_ms: float,
    slo_s: float | None = None,
) -> Run:
    """One run of `config` at `load` (share of the node's CPUs the service's work fills): the agent (C, D) starts
    first, the service is under load for `learn` seconds on its own (the agent sees it quiet), then the
    antagonists start, and after `settle` more seconds the measured `seconds` begin. `slo_s`: the p99 objective
    the service declares in DS."""
    floor = config in ("F0", "F1")
    rate = load * (1 if floor else n.ncpu) * 1000.0 / service_ms
    with contextlib.ExitStack() as stack, tempfile.NamedTemporaryFile(suffix=".lat") as out:
        antagonists: list[subprocess.Popen[bytes]] = []
        agent_pid, base = 0, ""
        if config == "DS":
            if slo_s is None:
                raise ValueError("DS needs the service's SLO")
            n.declare_slo(slo_s)
            stack.callback(n.declare_slo, None)  # (after the agent has stopped: callbacks run last in, first out)
        if config in AGENT:
            env = {**AGENT_ENV, **(PROTECTION_ENV if config in PROTECTED else {})}
            if config in LENDS:
                env.update(LENDING_ENV)
                stack.enter_context(n.allocatable(2 * n.ncpu))
            if config == "S":
                env.update(ISOLATION_ENV)
            agent_pid, base = stack.enter_context(n.agent(env))
        if config in TIER_IDLE:
            stack.enter_context(n.tier_idle())
        if config == "F0":
            n.pin_server({0})
            stack.callback(n.pin_server, set(range(n.ncpu)))
        # the schedule starts half a second from now on both clocks, so the CPU window and the latencies measured
        # are the same span however late the generator's process starts
        t_load = time.monotonic() + 0.5
        start_ns = time.time_ns() + 500_000_000
        argv = [n.exe, "loadgen", str(n.port), f"{rate:.3f}", str(learn + settle + seconds), str(1000 * rep + 7),
                out.name, str(learn + settle), str(start_ns)]  # fmt: skip
        gen = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        time.sleep(max(0.0, t_load + learn - time.monotonic()))
        started = time.monotonic()
        if config in BATCH:
            antagonists = stack.enter_context(n.batch())
        if config == "F1":
            antagonists = stack.enter_context(n.floor_loop())
        time.sleep(max(0.0, t_load + learn + settle + 0.02 - time.monotonic()))
        busy0, total0 = cpu_times()
        svc0, batch0 = n.cpuacct(n.online_pod), n.cpuacct(n.burn_pod) + n.cpuacct(n.stream_pod)
        floor0 = sum(process_cpu(p.pid) for p in antagonists) if floor else 0.0
        agent0, t0 = process_cpu(agent_pid) if agent_pid else 0.0, time.monotonic()
        own0 = service_histogram("127.0.0.1", n.port)
        polls: list[dict[str, Any]] = []
        poller = Poller(base, polls) if base else None
        time.sleep(max(0.0, t_load + learn + settle + seconds + 0.02 - time.monotonic()))
        elapsed = time.monotonic() - t0
        busy1, total1 = cpu_times()
        svc1, batch1 = n.cpuacct(n.online_pod), n.cpuacct(n.burn_pod) + n.cpuacct(n.stream_pod)
        floor1 = sum(process_cpu(p.pid) for p in antagonists) if floor else 0.0
        agent1 = process_cpu(agent_pid) if agent_pid else 0.0
        own1 = service_histogram("127.0.0.1", n.port)
        if poller is not None:
            poller.stop()
        section = enforcement(base) if base else {}
        writes = int(section.get("writes", 0))  # since the agent started
        done = stop(antagonists)  # before the agent stops: the work counted is the antagonists' whole life
        span = time.monotonic() - started
        if gen.wait(60) != 0:
            raise RuntimeError(f"loadgen exited with {gen.returncode}")
        raw = array.array("q")
        raw.frombytes(out.read())
    service = (svc1 - svc0) / elapsed
    batch = (batch1 - batch0) / elapsed + (floor1 - floor0) / elapsed
    agent = (agent1 - agent0) / elapsed
    busy = (busy1 - busy0) / elapsed
    ordered = sorted(x / 1e6 for x in raw if x >= 0)
    lost = sum(1 for x in raw if x < 0)
    ordered += [float("inf")] * lost  # a lost reply is later than any
    idle_left = max(n.ncpu - service, 1e-9)
    rq = protection_summary(polls)
    own = p99_of_increase(own0, own1) if own0 is not None and own1 is not None else None
    return Run(config, load, rep, len(raw), lost, quantile(ordered, 0.5), quantile(ordered, 0.99),
               quantile(ordered, 0.999), (busy1 - busy0) / ((total1 - total0) or 1e-9),
               service, batch, agent, max(0.0, busy - service - batch - agent), batch / idle_left if not floor else
               float("nan"), done[0] / span if config in BATCH else 0.0,
               done[1] / span / 2**30 if len(done) > 1 else 0.0, writes,
               float("nan") if own is None else 1000 * own, rq,
               ordered[:: max(1, len(ordered) // 2000)])  # fmt: skip


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    finite = [v for v in values if v == v]
    if not finite:
        return float("nan"), float("nan"), float("nan")
    return statistics.median(finite), min(finite), max(finite)


#: The figures `summary` takes the spread of (each a field of `Run`).
FIGURES = ("p50_ms", "p99_ms", "p999_ms", "node_util", "service_cores", "batch_cores", "agent_cores", "others_cores",
           "batch_share_of_idle", "burn_rounds_per_s", "stream_gib_per_s", "colo_writes", "own_p99_ms")  # fmt: skip


def summary(
    runs: Sequence[Any], keys: Sequence[str] = FIGURES, configs: Sequence[str] = CONFIGS
) -> list[dict[str, Any]]:
    """Per (load, config): median, min and max of each figure over the repetitions, and latency ratios to A's
    (to F0's for F1). `runs`: anything with `load`, `config` and the `keys` as attributes (the real node's too)."""
    rows: list[dict[str, Any]] = []
    for load in sorted({r.load for r in runs}):
        medians: dict[str, dict[str, float]] = {}
        for config in configs:
            mine = [r for r in runs if r.load == load and r.config == config]
            if not mine:
                continue
            row: dict[str, Any] = {"load": load, "config": config, "reps": len(mine)}
            for k in keys:
                row[k] = spread([float(getattr(r, k)) for r in mine])
            medians[config] = {k: row[k][0] for k in ("p50_ms", "p99_ms", "p999_ms")}
            base = medians.get("F0" if config == "F1" else "A")
            if base:
                row["ratio"] = {k: row[k][0] / base[k] for k in ("p50_ms", "p99_ms", "p999_ms")}
            rows.append(row)
    return rows


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    def f(t: tuple[float, float, float], scale: float = 1.0, digits: int = 2) -> str:
        m, lo, hi = (x * scale for x in t)
        return f"{m:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"

    print("median (min-max) over repetitions; x: the median's ratio to A's (F1: to F0's)")
    for r in rows:
        ratio = r.get("ratio", {})
        rs = " ".join(f"{ratio.get(k, float('nan')):.2f}x" for k in ("p50_ms", "p99_ms", "p999_ms"))
        print(f"load {r['load']:.0%} {r['config']:<2} {DESCRIBED[r['config']]} ({r['reps']} runs)")
        print(
            f"    p50 {f(r['p50_ms'])} ms  p99 {f(r['p99_ms'])} ms  p99.9 {f(r['p999_ms'])} ms  [{rs}]  "
            f"the service's own p99 {f(r['own_p99_ms'])} ms"
        )
        cores = (f"service {f(r['service_cores'])}  batch {f(r['batch_cores'])}  agent {f(r['agent_cores'], 1, 3)}"
                 f"  others {f(r['others_cores'])} cores")  # fmt: skip
        print(f"    node busy {f(r['node_util'], 100, 0)}%  {cores}")
        if r["config"] in BATCH:
            print(f"    batch share of the idle the service left {f(r['batch_share_of_idle'], 100, 0)}%  busy loop "
                  f"{f(r['burn_rounds_per_s'], 1e-9)} G rounds/s  stream {f(r['stream_gib_per_s'])} GiB/s  Colo's "
                  f"writes {f(r['colo_writes'], 1, 0)}")  # fmt: skip


def plot(runs: Sequence[Run], rows: Sequence[dict[str, Any]], path: str) -> None:
    """Latency CDF per configuration (every run pooled) at each load, and batch cores against p99."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads = sorted({r.load for r in runs})
    fig, axes = plt.subplots(1, len(loads) + 1, figsize=(4.2 * (len(loads) + 1), 3.4))
    colors = {"A": "black", "B": "tab:red", "C": "tab:orange", "D": "tab:green", "C2": "tab:brown",
              "D2": "tab:olive", "DS": "darkgreen", "E": "tab:purple", "ED": "tab:pink", "S": "tab:cyan",
              "F0": "tab:gray", "F1": "tab:blue"}  # fmt: skip
    for ax, load in zip(axes, loads, strict=False):
        for config in CONFIGS:
            lat = sorted(x for r in runs if r.load == load and r.config == config for x in r.latencies_ms)
            if not lat:
                continue
            finite = [x for x in lat if x != float("inf")]
            ys = [(i + 1) / len(lat) for i in range(len(finite))]
            ax.plot(finite, ys, color=colors[config], label=config, linewidth=1)
        ax.set_xscale("log")
        ax.set_ylim(0.9, 1.0005)
        ax.set_xlabel("latency, ms (log)")
        ax.set_title(f"latency CDF (top 10%), load {load:.0%}", fontsize=9)
        ax.legend(fontsize=7)
    ax = axes[-1]
    for r in runs:
        if r.config in BATCH:
            ax.scatter(r.batch_cores, r.p99_ms, color=colors[r.config], marker="o" if r.load == loads[0] else "^", s=14)
    for config in sorted({r.config for r in runs if r.config in BATCH}):
        ax.scatter([], [], color=colors[config], label=config, s=14)
    ax.set_xlabel("batch CPU, cores (o: lowest load, ^: higher)")
    ax.set_ylabel("p99, ms")
    ax.set_yscale("log")
    ax.set_title("batch throughput vs service p99", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)


def schedule(configs: Sequence[str], loads: Sequence[float], reps: int, ncpu: int) -> list[tuple[str, float, int]]:
    """Every (config, load, rep), interleaved: each repetition runs every configuration of every load once, the
    order rotated by one per repetition. The floor only where the service fits on one CPU."""
    out = []
    for rep in range(reps):
        one = [(c, load) for load in loads for c in configs if not (c.startswith("F") and load >= 0.9)]
        k = rep % len(one)
        out += [(c, load, rep) for c, load in one[k:] + one[:k]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--loads", default="0.3,0.6", help="the service's load, shares of the node's CPUs")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=15.0, help="measured load per run")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds after the antagonists start, not measured")
    ap.add_argument(
        "--learn",
        type=float,
        default=8.0,
        help="seconds the service runs under load before the antagonists start (the agent sees it quiet)",
    )
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--service-us", type=float, default=1000.0, help="fixed work per request")
    ap.add_argument("--stream-mib", type=int, default=512)
    ap.add_argument(
        "--kubepods-shares",
        type=int,
        help="cpu.shares of the kubepods root (kubelet: CPUs x 1024); "
        "on a machine shared with other people's processes, more keeps their load out of the figures",
    )
    ap.add_argument(
        "--slo-ratio",
        type=float,
        default=1.2,
        help="DS: the service's declared p99 objective, a ratio to the median p99 of the A runs at that load so far",
    )
    ap.add_argument("--quick", action="store_true", help="one repetition of 2 s at 30%%: the harness works")
    ap.add_argument("--json", help="write every run's figures here")
    ap.add_argument("--plot", help="write the plot (PNG) here")
    args = ap.parse_args()
    # SIGTERM runs the cleanup too (the cgroup tree, the agent's configuration): as an exception, not a kill
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if os.geteuid() != 0 or not shutil.which("gcc"):
        print("interference: needs root (cgroups) and gcc", file=sys.stderr)
        sys.exit(2)
    loads = [float(x) for x in args.loads.split(",")]
    configs = [c for c in args.configs.split(",") if c]
    if any(c not in CONFIGS for c in configs):
        print(f"interference: --configs takes {','.join(CONFIGS)}", file=sys.stderr)
        sys.exit(2)
    if (why := slo_order_error(configs)) is not None:
        print(f"interference: {why}", file=sys.stderr)
        sys.exit(2)
    if args.quick:
        loads, args.reps, args.seconds, args.settle, args.learn, args.stream_mib = [0.3], 1, 2.0, 2.0, 3.0, 64
    with tempfile.TemporaryDirectory() as work:
        exe = compile_programs(work)
        iters = calibrate(exe, args.service_us)
        n = Node(exe, iters, args.stream_mib, args.kubepods_shares)
        runs: list[Run] = []
        load_start = os.getloadavg()
        try:
            for config, load, rep in schedule(configs, loads, args.reps, n.ncpu):
                slo = slo_seconds(runs, load, args.slo_ratio)
                r = measure(n, config, load, rep, args.seconds, args.settle, args.learn, args.service_us / 1000, slo)
                runs.append(r)
                print(f"  {config:<2} load {load:.0%} rep {rep}: p99 {r.p99_ms:.2f} ms p99.9 {r.p999_ms:.2f} ms "
                      f"batch {r.batch_cores:.2f} others {r.others_cores:.2f} cores", flush=True)  # fmt: skip
            leftover = [n.quota(c) for c in (n.burn_pod, n.burn_ctr, n.stream_pod, n.stream_ctr)]
            tier_idle = n.tier_idle_value()
        finally:
            n.close()
    rows = summary(runs)
    print(
        f"interference: {n.ncpu} CPUs, {iters} rounds = {args.service_us:.0f} us of work per request, "
        f"{args.seconds:.0f} s per run, load average {load_start[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end"
    )
    print_table(rows)
    if any(q != -1 for q in leftover):
        print(f"  WARNING: quotas left on the batch pods after the agent stopped: {leftover}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": [{k: v for k, v in asdict(r).items() if k != "latencies_ms"} for r in runs],
                       "summary": rows, "quotas_after": leftover, "tier_idle_after": tier_idle}, f,
                      default=str)  # fmt: skip
    if args.plot:
        plot(runs, rows, args.plot)


if __name__ == "__main__":
    main()
