"""Per-interface byte counters of the physical interfaces, from sysfs (`/sys/class/net/<if>/statistics`).

A node runs one veth per pod, so the list of physical interfaces (those backed by a device: not lo, veths,
bridges) is refreshed once a minute from the directory listing, and each tick preads only their two counter
files through descriptors kept open: a few microseconds, and no netlink library in the agent's memory
(pyroute2 cost 13 MiB of RSS for two numbers per interface).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

from common.logs import Repeats, repeated

log = logging.getLogger(__name__)
REFRESH_SECONDS = 60.0
COUNTERS = ("rx_bytes", "tx_bytes")


@dataclass(frozen=True, slots=True)
class InterfaceCounters:
    name: str
    rx_bytes: int
    tx_bytes: int


class NetCounters:
    """Physical means backed by a device: `/sys/class/net/<if>/device` exists."""

    def __init__(self, host_root: str = "/") -> None:
        self.sys_net = os.path.join(host_root, "sys/class/net")
        self._fds: dict[str, tuple[int, int]] = {}  # interface -> (rx_bytes, tx_bytes) descriptors
        self._refreshed: float | None = None
        self.ok = True  # the last read found everything it looked for
        self._failures = Repeats()  # an unreadable sysfs fails every pass: report it once a minute

    def _is_physical(self, name: str) -> bool:
        return os.path.exists(os.path.join(self.sys_net, name, "device"))

    def _refresh(self) -> None:
        self.close()
        for name in sorted(os.listdir(self.sys_net)):
            if not self._is_physical(name):
                continue
            stats = os.path.join(self.sys_net, name, "statistics")
            fds: list[int] = []
            try:
                for counter in COUNTERS:
                    fds.append(os.open(os.path.join(stats, counter), os.O_RDONLY | os.O_CLOEXEC))
            except OSError:
                for fd in fds:
                    os.close(fd)
                continue
            self._fds[name] = (fds[0], fds[1])

    def read(self, now: float) -> list[InterfaceCounters]:
        """Counters of every physical interface; [] (logged) when sysfs fails, never an exception. An
        interface that went away is dropped until the next refresh."""
        self.ok = True
        try:
            if self._refreshed is None or now - self._refreshed >= REFRESH_SECONDS:
                self._refresh()
                self._refreshed = now
        except OSError as exc:
            if (held := self._failures.occurred("sysfs")) is not None:
                log.warning("cannot list network interfaces in %s: %s%s", self.sys_net, exc, repeated(held))
            self.close()
            self.ok = False
            return []
        if (failed := self._failures.ended("sysfs")) is not None:
            log.info("network interfaces in %s readable again after %d failed passes", self.sys_net, failed)
        out: list[InterfaceCounters] = []
        for name, (rx_fd, tx_fd) in list(self._fds.items()):
            try:
                rx, tx = int(os.pread(rx_fd, 32, 0)), int(os.pread(tx_fd, 32, 0))
            except (OSError, ValueError):
                self.ok = False
                self._close(name)
                self._refreshed = None  # look again next pass
                continue
            out.append(InterfaceCounters(name, rx, tx))
        return out

    def _close(self, name: str) -> None:
        for fd in self._fds.pop(name, ()):
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        for name in list(self._fds):
            self._close(name)
        self._refreshed = None
