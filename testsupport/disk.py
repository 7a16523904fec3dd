"""Real block devices and blkio cgroups for disk QoS tests and benchmarks: a loop device over a sparse file
(always detached), a V1Tree whose cgroups exist in the blkio hierarchy too, and `dd oflag=direct` run from
inside a cgroup with dd's own measure of its rate."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

from testsupport.cgtree import V1Tree

MIB = 1 << 20
COPIED = re.compile(rb"(\d+) bytes .* copied, ([0-9.]+) s")


class DiskTree(V1Tree):
    """A V1Tree whose cgroups also exist in the blkio hierarchy (the processes enter it too)."""

    def controllers(self) -> list[str]:
        return [*super().controllers(), "blkio"]


@contextlib.contextmanager
def loop_device(directory: str, size_mib: int = 256) -> Iterator[tuple[str, str]]:
    """(device path, 'MAJ:MIN') of a loop device over a sparse file in `directory`; detached afterwards."""
    backing = os.path.join(directory, "disk.img")
    with open(backing, "wb") as f:
        f.truncate(size_mib * MIB)
    dev = subprocess.run(["losetup", "--find", "--show", backing], check=True, capture_output=True,
                         text=True).stdout.strip()  # fmt: skip
    try:
        yield dev, Path(f"/sys/block/{os.path.basename(dev)}/dev").read_text().strip()
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
        os.unlink(backing)


def dd(tree: V1Tree, cgroup: str, device: str, mib: int, seek_mib: int) -> float:
    """Write `mib` MiB with O_DIRECT from inside the cgroup; bytes per second as dd measured them."""
    return dd_in([f"{tree.layout.dir(c, cgroup)}/cgroup.procs" for c in tree.controllers()], device, mib, seek_mib)


def dd_in(files: list[str], device: str, mib: int, seek_mib: int) -> float:
    """`dd` as above, entering the cgroups whose `cgroup.procs` files are given (one on v2)."""

    def enter() -> None:
        for f in files:
            with open(f, "w") as fh:
                fh.write(str(os.getpid()))

    out = subprocess.run(
        ["dd", "if=/dev/zero", f"of={device}", "oflag=direct", "bs=1M", f"count={mib}", f"seek={seek_mib}"],
        preexec_fn=enter, capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    m = COPIED.search(out.stderr)
    if m is None:
        raise RuntimeError(f"dd said: {out.stderr!r}")
    return int(m.group(1)) / float(m.group(2))
