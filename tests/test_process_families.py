"""`process_*` of a Colo program: prometheus-client's families, the open descriptors counted from
/proc/self/fd's size instead of a listing of thousands of entries. Compared in a fresh interpreter: in the
test process other tests' threads (informers, servers) open and close descriptors between two readings."""

from __future__ import annotations

import json
import subprocess
import sys

COMPARE = """
import json, os
from prometheus_client import ProcessCollector
from common.process import OwnProcess
fds = [os.open("/proc/self/stat", os.O_RDONLY) for _ in range(300)]  # a cache of open cgroup files
try:
    ours, lib = list(OwnProcess().collect()), list(ProcessCollector(registry=None).collect())
finally:
    for fd in fds:
        os.close(fd)
print(json.dumps({
    "shape": [[m.name, m.documentation, m.type, [s.name for s in m.samples]] for m in ours],
    "lib_shape": [[m.name, m.documentation, m.type, [s.name for s in m.samples]] for m in lib],
    "ours": {m.name: m.samples[0].value for m in ours},
    "lib": {m.name: m.samples[0].value for m in lib},
}))
"""


def test_the_librarys_families_and_its_descriptor_count() -> None:
    out = subprocess.run([sys.executable, "-c", COMPARE], capture_output=True, text=True, check=True, timeout=60)
    got = json.loads(out.stdout)
    assert got["shape"] == got["lib_shape"]
    values, lib_values = got["ours"], got["lib"]
    assert values["process_open_fds"] == lib_values["process_open_fds"] >= 300
    for name in ("process_max_fds", "process_start_time_seconds"):
        assert values[name] == lib_values[name]
    assert 0 < values["process_cpu_seconds"] <= lib_values["process_cpu_seconds"]
