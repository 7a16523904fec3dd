"""A real kubepods-like cgroup v1 tree for tests: created under the mounted controllers with a unique
cgroup root per run, real processes started inside, everything removed afterwards (also on failure)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from cgroup import CgroupReader, Layout, PathModel, QoS, detect_layout
from cgroup.paths import Driver

CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")

BURN = "import sys\nwhile True:\n    pass\n"
# allocate and touch N MiB of anonymous memory, say "ok", then wait for stdin to close
ALLOC = (
    "import sys\nn = int(sys.argv[1])\nb = b'x' * (n << 20)\n"
    "sys.stdout.write('ok\\n'); sys.stdout.flush()\nsys.stdin.read()\n"
)


def v1_available() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        layout = detect_layout("/")
    except Exception:
        return False
    return layout.mode in ("v1", "hybrid") and all(c in layout.v1 for c in ("cpu", "cpuacct", "memory"))


class V1Tree:
    """Owns every cgroup and process it creates; `cleanup()` kills and removes them bottom-up."""

    def __init__(self, driver: Driver = "cgroupfs", layout: Layout | None = None) -> None:
        self.layout = layout or detect_layout("/")
        self.root_name = "colotest" + uuid.uuid4().hex[:10]
        self.cgroup_root = "/" + self.root_name
        self.model = PathModel(driver, self.cgroup_root)
        self.driver = driver
        self._dirs: list[str] = []  # relative cgroup paths in creation order
        self.procs: list[subprocess.Popen[bytes]] = []

    def controllers(self) -> list[str]:
        return [c for c in CONTROLLERS if c in self.layout.v1]

    def mkdir(self, cgroup: str) -> str:
        """Create the cgroup (and missing parents) in every controller; cpuset inherits cpus/mems."""
        parts = cgroup.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            rel = "/" + "/".join(parts[:i])
            if rel in self._dirs:
                continue
            for ctrl in self.controllers():
                d = self.layout.dir(ctrl, rel)
                os.makedirs(d, exist_ok=True)
                if ctrl == "cpuset":
                    parent = os.path.dirname(d)
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        with open(f"{parent}/{f}") as src:
                            value = src.read().strip()
                        with open(f"{d}/{f}", "w") as dst:
                            dst.write(value)
            self._dirs.append(rel)
        return cgroup

    def pod(self, qos: QoS, uid: str | None = None, containers: int = 1) -> tuple[str, str, list[str]]:
        """Create a pod cgroup with container cgroups; returns (uid, pod path, container paths)."""
        uid = uid or str(uuid.uuid4())
        pod = self.mkdir(self.model.pod(qos, uid))
        paths = []
        for _ in range(containers):
            cid = uuid.uuid4().hex + uuid.uuid4().hex
            name = f"cri-containerd-{cid}.scope" if self.driver == "systemd" else cid
            paths.append(self.mkdir(f"{pod}/{name}"))
        return uid, pod, paths

    def start(self, cgroup: str, code: str = BURN, *args: str) -> subprocess.Popen[bytes]:
        """Start a Python process that enters the cgroup (every controller) before running `code`."""
        files = [f"{self.layout.dir(c, cgroup)}/cgroup.procs" for c in self.controllers()]

        def enter() -> None:
            for f in files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))

        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            preexec_fn=enter,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.procs.append(proc)
        return proc

    def allocate(self, cgroup: str, mib: int) -> subprocess.Popen[bytes]:
        proc = self.start(cgroup, ALLOC, str(mib))
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == b"ok\n", line
        return proc

    def write(self, controller: str, cgroup: str, name: str, value: str) -> None:
        with open(f"{self.layout.dir(controller, cgroup)}/{name}", "w") as f:
            f.write(value)

    def remove(self, cgroup: str) -> None:
        """Kill the cgroup's processes and remove it (and its children) from every controller."""
        doomed = sorted((d for d in self._dirs if d == cgroup or d.startswith(cgroup + "/")), key=len, reverse=True)
        self._kill_in(doomed)
        for rel in doomed:
            self._rmdir(rel)
            self._dirs.remove(rel)

    def _kill_in(self, cgroups: list[str]) -> None:
        for rel in cgroups:
            with contextlib.suppress(OSError), open(f"{self.layout.dir('cpu', rel)}/cgroup.procs") as f:
                for pid in f.read().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    with open(f"/proc/{p.pid}/cgroup") as f:
                        mine = any(c in f.read() for c in cgroups)
                    if mine:
                        p.kill()
                        p.wait(5)

    def _rmdir(self, rel: str) -> None:
        for ctrl in self.controllers():
            d = self.layout.dir(ctrl, rel)
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)  # tasks still exiting

    def cleanup(self) -> None:
        end_processes(self.procs)
        self._kill_in(list(self._dirs))
        for rel in sorted(self._dirs, key=len, reverse=True):
            self._rmdir(rel)
        self._dirs.clear()


def end_processes(procs: Sequence[subprocess.Popen[Any]]) -> None:
    """Kill and reap the test's processes and close their pipes (v1 and v2 trees alike)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        with contextlib.suppress(Exception):
            p.wait(5)
        for s in (p.stdin, p.stdout):
            if s is not None:
                with contextlib.suppress(Exception):
                    s.close()


@contextlib.contextmanager
def v1_tree(driver: Driver = "cgroupfs") -> Iterator[V1Tree]:
    tree = V1Tree(driver)
    try:
        yield tree
    finally:
        tree.cleanup()


def quota_window(reader: CgroupReader, cgroup: str, seconds: float, period_us: int = 100_000) -> tuple[float, float]:
    """(cores per CFS period the cgroup ran in, share of those periods it was throttled in), from the kernel's
    counters over `seconds`. Both hold on a busy machine: a burner that other load starves runs fewer periods
    and is throttled in fewer, but in each one it is throttled it has used exactly its quota."""
    a = reader.cpu(cgroup)
    time.sleep(seconds)
    b = reader.cpu(cgroup)
    periods = max(b.nr_periods - a.nr_periods, 1)
    return (b.usage_ns - a.usage_ns) / 1e3 / (periods * period_us), (b.nr_throttled - a.nr_throttled) / periods


def assert_quota_binds(
    reader: CgroupReader, cgroup: str, quota: float, seconds: float, period_us: int = 100_000
) -> None:
    """The burner in `cgroup` gets at most `quota` cores per period, and that much in every period it was
    throttled in (on a quiet machine every period; a busy one may starve it below its quota)."""
    per_period, throttled = quota_window(reader, cgroup, seconds, period_us)
    assert per_period <= quota + 0.03, (per_period, throttled)
    assert per_period >= quota * throttled - 0.03, (per_period, throttled)
