"""systemd or cgroupfs: which cgroup driver kubelet uses on this host, and which rule said so.

A wrong guess sends every read to paths that do not exist, so the decision is explicit and reported:
an explicit setting, then kubelet's config file, then kubelet's command line, then the filesystem.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from cgroup.layout import Layout
from cgroup.paths import Driver, PathModel

DEFAULT_KUBELET_CONFIGS = ("/var/lib/kubelet/config.yaml", "/etc/kubernetes/kubelet-config.yaml")


@dataclass(frozen=True, slots=True)
class DriverDecision:
    driver: Driver
    rule: str


def _driver_value(value: object, source: str) -> Driver:
    if value in ("systemd", "cgroupfs"):
        return value
    raise ValueError(f"{source}: cgroup driver {value!r} is neither 'systemd' nor 'cgroupfs'")


def _from_config_file(path: str) -> Driver | None:
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return None
    if isinstance(doc, dict) and "cgroupDriver" in doc:
        return _driver_value(doc["cgroupDriver"], path)
    return None


def kubelet_cmdline(host_root: str = "/") -> list[str] | None:
    """kubelet's argv from the host's /proc, or None when no kubelet process is visible."""
    proc = os.path.join(host_root, "proc")
    try:
        entries = os.listdir(proc)
    except OSError:
        return None
    for pid in entries:
        if not pid.isdigit():
            continue
        try:
            with open(os.path.join(proc, pid, "cmdline"), "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == "kubelet":
            return argv
    return None


def _flag(argv: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def detect_driver(
    layout: Layout,
    *,
    explicit: str | None = None,
    host_root: str = "/",
    cgroup_root: str = "/",
    kubelet_configs: Sequence[str] = DEFAULT_KUBELET_CONFIGS,
    argv: Sequence[str] | None = None,
) -> DriverDecision:
    """Decide the driver; `argv` overrides the kubelet command line found in /proc (tests)."""
    if explicit:
        return DriverDecision(_driver_value(explicit, "setting cgroupDriver"), "explicit setting")
    for cfg in kubelet_configs:
        path = os.path.join(host_root, cfg.lstrip("/"))
        found = _from_config_file(path)
        if found:
            return DriverDecision(found, f"kubelet config {path}: cgroupDriver: {found}")
    if argv is None:
        argv = kubelet_cmdline(host_root)
    if argv:
        flag = _flag(argv, "--cgroup-driver")
        if flag:
            return DriverDecision(_driver_value(flag, "kubelet --cgroup-driver"), f"kubelet --cgroup-driver={flag}")
        config = _flag(argv, "--config")
        if config:
            path = os.path.join(host_root, config.lstrip("/"))
            found = _from_config_file(path)
            if found:
                return DriverDecision(found, f"kubelet --config {path}: cgroupDriver: {found}")
    controller = "cpu" if not layout.is_v2 else "unified"
    drivers: tuple[Driver, ...] = ("systemd", "cgroupfs")
    for driver in drivers:
        where = layout.dir("cpu", PathModel(driver, cgroup_root).kubepods())
        if os.path.isdir(where):
            return DriverDecision(driver, f"filesystem: {where} exists ({controller} hierarchy)")
    return DriverDecision("cgroupfs", "no kubelet config, flag or kubepods cgroup found: kubelet's default cgroupfs")
