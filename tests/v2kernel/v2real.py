"""A real kubelet-shaped cgroup v2 tree inside the UML guest: every level created the way kubelet and the
runtime do (controllers enabled in each parent's `cgroup.subtree_control`), real processes in the leaves,
everything killed and removed afterwards (also on failure)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

from cgroup import Layout, PathModel, QoS, detect_layout
from cgroup.paths import Driver
from testsupport.cgtree import ALLOC, BURN, end_processes

CONTROLLERS = "+cpu +memory +pids +io"
SLEEP = "import sys\nsys.stdin.read()\n"


def guest_layout() -> Layout:
    layout = detect_layout("/")
    assert layout.mode == "v2", f"the guest should have a pure cgroup v2 hierarchy, not {layout.mode}"
    return layout


class V2Tree:
    """Owns every cgroup and process it creates under the real unified mount."""

    def __init__(self, driver: Driver = "cgroupfs", cgroup_root: str = "/") -> None:
        self.layout = guest_layout()
        self.driver = driver
        self.model = PathModel(driver, cgroup_root)
        self._dirs: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def dir(self, cgroup: str) -> str:
        return self.layout.dir("cpu", cgroup)

    def mkdir(self, cgroup: str) -> str:
        """Create the cgroup and missing parents; a parent hands its controllers down (subtree_control)."""
        parts = cgroup.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            rel = "/" + "/".join(parts[:i])
            parent = self.dir(os.path.dirname(rel))
            with open(f"{parent}/cgroup.subtree_control", "w") as f:
                f.write(CONTROLLERS)
            if not os.path.isdir(self.dir(rel)):
                os.mkdir(self.dir(rel))
                self._dirs.append(rel)
        return cgroup

    def pod(self, qos: QoS, uid: str | None = None, containers: int = 1) -> tuple[str, str, list[str]]:
        """A pod cgroup with container cgroups; returns (uid, pod path, container paths)."""
        uid = uid or str(uuid.uuid4())
        if qos != "guaranteed":
            self.mkdir(self.model.tier(qos))
        pod = self.mkdir(self.model.pod(qos, uid))
        paths = []
        for _ in range(containers):
            cid = uuid.uuid4().hex + uuid.uuid4().hex
            name = f"cri-containerd-{cid}.scope" if self.driver == "systemd" else cid
            paths.append(self.mkdir(f"{pod}/{name}"))
        return uid, pod, paths

    def start(self, cgroup: str | None, code: str = BURN, *args: str) -> subprocess.Popen[bytes]:
        """A Python process that enters the cgroup (None: stays in the test's) before running `code`."""
        procs = f"{self.dir(cgroup or '/')}/cgroup.procs"

        def enter() -> None:
            if cgroup is None:
                return
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))

        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], preexec_fn=enter, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.procs.append(proc)
        return proc

    def move(self, proc: subprocess.Popen[bytes], cgroup: str) -> None:
        """Move a started process into `cgroup` (a throttled cgroup would take long to start Python in)."""
        self.write(cgroup, "cgroup.procs", str(proc.pid))

    def allocate(self, cgroup: str, mib: int) -> subprocess.Popen[bytes]:
        """A process holding `mib` MiB of touched anonymous memory once this returns."""
        proc = self.start(cgroup, ALLOC, str(mib))
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == b"ok\n", line
        return proc

    def write(self, cgroup: str, name: str, value: str) -> None:
        with open(f"{self.dir(cgroup)}/{name}", "w") as f:
            f.write(value)

    def read(self, cgroup: str, name: str) -> str:
        with open(f"{self.dir(cgroup)}/{name}") as f:
            return f.read().strip()

    def stat(self, cgroup: str, name: str = "cpu.stat") -> dict[str, int]:
        return {k: int(v) for k, v in (line.split() for line in self.read(cgroup, name).splitlines())}

    def cleanup(self) -> None:
        end_processes(self.procs)
        for rel in sorted(self._dirs, key=len, reverse=True):
            with contextlib.suppress(OSError), open(f"{self.dir(rel)}/cgroup.procs") as f:
                for pid in f.read().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            for _ in range(100):
                try:
                    os.rmdir(self.dir(rel))
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)  # tasks still exiting
        self._dirs.clear()


@contextlib.contextmanager
def v2_tree(driver: Driver = "cgroupfs") -> Iterator[V2Tree]:
    tree = V2Tree(driver)
    try:
        yield tree
    finally:
        tree.cleanup()
