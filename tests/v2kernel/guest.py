"""The cgroup v2 tier, host side: boot Debian's user-mode Linux kernel once per pytest run with the host's
filesystem as its root, run the tier's tests inside it, and report each as an ordinary host test item.

Tests marked `v2kernel` are collected on the host as usual, then replaced by `GuestItem`s with the same node
ids. The first one to run boots the guest for all of them; each then passes, fails (with the guest's own
failure text) or skips as its guest twin did. Inside the guest (`COLO_UML_GUEST=1`) the real tests run.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.v2kernel.report import RESULTS_ENV

GUEST_ENV = "COLO_UML_GUEST"
KERNEL_ENV = "COLO_UML_KERNEL"  # another kernel binary, or "" to skip the tier
KEEP_ENV = "COLO_UML_KEEP"  # 1: keep the guest's console, log and results for a look
DEFAULT_KERNEL = "/usr/bin/linux.uml"
GUEST_DISK_MIB = 128  # the guest's block device ubda, a sparse file in the run's directory
BOOT_TIMEOUT = 600.0  # the whole guest run, boot to halt; the tier takes about a minute on a quiet machine
REPO = Path(__file__).resolve().parents[2]

INIT = """#!/bin/sh
# init of the UML guest: a real cgroup v2 hierarchy, loopback for the fake API server, then the tests
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME={tmp} TMPDIR={tmp}/guest-tmp
export {guest_env}=1 {results_env}={tmp}/results.jsonl PYTHONDONTWRITEBYTECODE=1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
mkdir -p {tmp}/guest-tmp
echo started > {tmp}/started
cd {repo}
{python} -m pytest -p tests.v2kernel.report -p no:cacheprovider -q --durations=0 -s --basetemp={tmp}/basetemp \\
  {args} > {tmp}/guest.log 2>&1
echo $? > {tmp}/exit
halt -f
"""


def in_guest() -> bool:
    return os.environ.get(GUEST_ENV) == "1"


def kernel_or_reason() -> tuple[str | None, str]:
    """The UML kernel to boot, or None and the one-line reason it cannot run here."""
    kernel = os.environ.get(KERNEL_ENV, DEFAULT_KERNEL)
    if not kernel:
        return None, f"{KERNEL_ENV} is empty"
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return None, f"user-mode Linux needs x86_64 Linux, not {platform.system()} {platform.machine()}"
    if not os.access(kernel, os.X_OK):
        return None, f"{kernel} not found (apt-get install user-mode-linux)"
    return kernel, ""


@dataclass
class GuestOutcome:
    """One guest test, all phases folded: failed if any phase failed, else skipped if any skipped."""

    outcome: str = "passed"
    text: str = ""
    skip: str = ""
    duration: float = 0.0


@dataclass
class GuestRun:
    """One boot of the guest for a list of node ids; results or the reason there are none."""

    nodeids: list[str]
    results: dict[str, GuestOutcome] = field(default_factory=dict)
    skip_reason: str = ""
    error: str = ""
    seconds: float = 0.0

    def run(self) -> None:
        kernel, reason = kernel_or_reason()
        if kernel is None:
            self.skip_reason = reason
            return
        tmp = Path(tempfile.mkdtemp(prefix="colo-uml-"))
        try:
            self._boot(kernel, tmp)
        finally:
            if os.environ.get(KEEP_ENV) == "1":
                print(f"\nUML guest files kept in {tmp}", file=sys.stderr)
            else:
                shutil.rmtree(tmp, ignore_errors=True)

    def _boot(self, kernel: str, tmp: Path) -> None:
        args = " ".join(f"'{n}'" for n in self.nodeids)
        script = tmp / "init.sh"
        values = {"tmp": tmp, "repo": REPO, "python": sys.executable, "args": args}
        script.write_text(INIT.format(guest_env=GUEST_ENV, results_env=RESULTS_ENV, **values))
        script.chmod(0o755)
        cmd = [
            kernel, "mem=1G", "root=/dev/root", "rootfstype=hostfs", "rootflags=/", "rw", f"init={script}",
            "con=null", "con0=fd:0,fd:1", f"uml_dir={tmp}", "umid=colo-v2", f"ubd0={self._disk(tmp)}",
        ]  # fmt: skip
        console = tmp / "console.log"
        start = time.monotonic()
        with open(console, "wb") as out:
            # the guest's processes are host processes of the kernel's group: a timeout kills them all
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "TMPDIR": str(tmp)},
            )  # fmt: skip
            try:
                proc.wait(BOOT_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                self.error = f"the UML guest did not halt within {BOOT_TIMEOUT:.0f} s"
        self.seconds = time.monotonic() - start
        if not (tmp / "started").exists():
            tail = console.read_text(errors="replace").strip().splitlines()[-1:] or ["no console output"]
            self.skip_reason = f"{kernel} cannot run here (exit {proc.returncode}): {tail[0][:200]}"
            return
        self._read(tmp)

    @staticmethod
    def _disk(tmp: Path) -> Path:
        """A sparse 128 MiB file the guest sees as its block device ubda (disk QoS throttles it)."""
        disk = tmp / "ubda.img"
        with open(disk, "wb") as f:
            f.truncate(GUEST_DISK_MIB << 20)
        return disk

    def _read(self, tmp: Path) -> None:
        results = tmp / "results.jsonl"
        lines = results.read_text().splitlines() if results.exists() else []
        for raw in lines:
            rep: dict[str, Any] = json.loads(raw)
            got = self.results.setdefault(rep["nodeid"], GuestOutcome())
            got.duration += rep["duration"]
            if rep["outcome"] == "failed" and got.outcome != "failed":
                where = "" if rep["when"] == "call" else f"(error in {rep['when']}) "
                got.outcome, got.text = "failed", where + rep["text"]
            elif rep["outcome"] == "skipped" and got.outcome == "passed":
                got.outcome, got.skip = "skipped", rep["skip"]
        missing = [n for n in self.nodeids if n not in self.results]
        if missing and not self.error:
            log = (tmp / "guest.log").read_text(errors="replace") if (tmp / "guest.log").exists() else ""
            self.error = "the guest's pytest ended early:\n" + "\n".join(log.splitlines()[-30:])


class GuestFailure(Exception):
    """A test that failed inside the guest; its text is the guest's own report."""


class GuestItem(pytest.Item):
    """Stands on the host for one test that runs inside the UML guest."""

    run: GuestRun | None = None  # one per session, shared by every item

    def runtest(self) -> None:
        run = self._session_run()
        if run.skip_reason:
            pytest.skip(run.skip_reason)
        got = run.results.get(self.nodeid)
        if got is None:
            raise GuestFailure(run.error or "no result came back from the guest")
        if got.outcome == "skipped":
            pytest.skip(got.skip)
        if got.outcome == "failed":
            raise GuestFailure(got.text)

    def _session_run(self) -> GuestRun:
        if GuestItem.run is None or self.nodeid not in GuestItem.run.nodeids:
            ids = [i.nodeid for i in self.session.items if isinstance(i, GuestItem)]
            GuestItem.run = GuestRun(ids)
            GuestItem.run.run()
        return GuestItem.run

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, GuestFailure):
            return f"in the UML guest (cgroup v2):\n{excinfo.value}"
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[str, int | None, str]:
        return str(self.path), None, f"{self.name} (UML guest)"


def summary() -> str | None:
    """One line for the terminal summary: how the guest run went."""
    run = GuestItem.run
    if run is None:
        return None
    if run.skip_reason:
        return f"cgroup v2 tier skipped: {run.skip_reason}"
    slowest = sorted(run.results.items(), key=lambda kv: -kv[1].duration)[:3]
    times = ", ".join(f"{n.rsplit('::', 1)[-1]} {r.duration:.1f} s" for n, r in slowest)
    return (
        f"cgroup v2 tier: {len(run.nodeids)} tests in a UML guest, {run.seconds:.1f} s boot to halt; slowest: {times}"
    )


def mirror_guest_items(items: list[pytest.Item]) -> None:
    """Replace, in place, every `v2kernel` test collected on the host by its guest stand-in."""
    for i, item in enumerate(items):
        if item.get_closest_marker("v2kernel") is None or item.parent is None:
            continue
        twin = GuestItem.from_parent(item.parent, name=item.name)
        for mark in [*item.iter_markers(), pytest.mark.timeout(BOOT_TIMEOUT + 60).mark]:
            if mark.name != "parametrize":
                twin.own_markers.append(mark)
                twin.keywords[mark.name] = mark
        items[i] = twin
