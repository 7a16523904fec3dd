"""Per-interface byte counters of the physical interfaces over rtnetlink (pyroute2).

A node runs one veth per pod, and parsing a full link dump every second costs milliseconds; so the list of
physical interfaces is refreshed from a dump once a minute, and each tick asks only for those.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute

from common.logs import Repeats, repeated

log = logging.getLogger(__name__)
REFRESH_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class InterfaceCounters:
    name: str
    rx_bytes: int
    tx_bytes: int


class NetLinkCounters:
    """Physical means backed by a device: `/sys/class/net/<if>/device` exists (not lo, veth, bridges)."""

    def __init__(self, host_root: str = "/") -> None:
        self.sys_net = os.path.join(host_root, "sys/class/net")
        self._ipr: IPRoute | None = None
        self._physical: dict[int, str] = {}
        self._refreshed: float | None = None
        self._failures = Repeats()  # a broken netlink fails every pass: report it once a minute

    def _is_physical(self, name: str) -> bool:
        return os.path.exists(os.path.join(self.sys_net, name, "device"))

    @staticmethod
    def _counters(link: Any) -> InterfaceCounters | None:
        name = link.get_attr("IFLA_IFNAME")
        stats = link.get_attr("IFLA_STATS64") or link.get_attr("IFLA_STATS")
        if not name or not stats:
            return None
        return InterfaceCounters(name, int(stats["rx_bytes"]), int(stats["tx_bytes"]))

    def read(self, now: float) -> list[InterfaceCounters]:
        """Counters of every physical interface; [] (logged) when netlink fails, never an exception."""
        try:
            if self._ipr is None:
                self._ipr = IPRoute()
            if self._refreshed is None or now - self._refreshed >= REFRESH_SECONDS:
                links = self._ipr.get_links()
                self._physical = {
                    link["index"]: name
                    for link in links
                    if (name := link.get_attr("IFLA_IFNAME")) and self._is_physical(name)
                }
                self._refreshed = now
                links = [link for link in links if link["index"] in self._physical]
            elif self._physical:
                links = self._ipr.get_links(*self._physical)
            else:
                links = []
        except Exception as exc:  # a vanished interface or a netlink error must not stop a pass
            if (held := self._failures.occurred("netlink")) is not None:
                log.warning("netlink: cannot read interface counters: %s%s", exc, repeated(held))
            self.close()
            return []
        if (failed := self._failures.ended("netlink")) is not None:
            log.info("netlink: interface counters readable again after %d failed reads", failed)
        return [c for link in links if (c := self._counters(link)) is not None]

    def close(self) -> None:
        self._refreshed = None
        if self._ipr is not None:
            try:
                self._ipr.close()
            finally:
                self._ipr = None
