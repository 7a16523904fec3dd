"""cgroup: the one place that knows cgroup file layouts (v1/v2, systemd/cgroupfs, runtimes)."""

from cgroup.counters import CounterFiles
from cgroup.discovery import ContainerCgroup, PodCgroup, discover_pods, resolve_pod
from cgroup.driver import DriverDecision, detect_driver
from cgroup.errors import (
    CgroupError,
    CgroupFileMissing,
    CgroupGone,
    CgroupParseError,
    CgroupPermissionError,
    CgroupValueError,
    CgroupWriteError,
    Unsupported,
)
from cgroup.files import FileCache
from cgroup.layout import Layout, Mount, detect_layout, parse_mountinfo
from cgroup.paths import (
    QOS_CLASSES,
    ContainerID,
    Driver,
    PathModel,
    QoS,
    normalize_qos,
    parent_cgroup,
    parse_container_id,
)
from cgroup.reader import CgroupReader, CpuSettings, CpuUsage, MemoryProtection, MemoryUsage, PsiReading
from cgroup.writer import CgroupWriter, LimitChange, apply_in_safe_order, shares_to_weight, weight_to_shares

__all__ = [
    "QOS_CLASSES",
    "CgroupError",
    "CgroupFileMissing",
    "CgroupGone",
    "CgroupParseError",
    "CgroupPermissionError",
    "CgroupReader",
    "CgroupValueError",
    "CgroupWriteError",
    "CgroupWriter",
    "ContainerCgroup",
    "ContainerID",
    "CounterFiles",
    "CpuSettings",
    "CpuUsage",
    "Driver",
    "DriverDecision",
    "FileCache",
    "Layout",
    "LimitChange",
    "MemoryProtection",
    "MemoryUsage",
    "Mount",
    "PathModel",
    "PodCgroup",
    "PsiReading",
    "QoS",
    "Unsupported",
    "apply_in_safe_order",
    "detect_driver",
    "detect_layout",
    "discover_pods",
    "normalize_qos",
    "parent_cgroup",
    "parse_container_id",
    "parse_mountinfo",
    "resolve_pod",
    "shares_to_weight",
    "weight_to_shares",
]
