"""The QoS sections: what Colo does for online pods themselves (`qos`: CPU burst, quota burst, memory QoS) and
the egress limits of offline pods (`network_qos`); all off by default."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agent.config_sections.strict import Strict


class CpuBurstConfig(Strict):
    """CFS burst for online pods with a CPU limit (agent/enforce/strategies/cpu_burst.py)."""

    enabled: bool = False  # every online pod; without it a pod opts in by volcano.sh/enable-quota-burst=true
    burst_percent: int = Field(default=100, ge=1, le=100)  # of the quota: the kernel refuses a burst above it


class QuotaBurstConfig(Strict):
    """Raise a throttled online container's quota while the node is idle (agent/enforce/strategies/quota_burst.py)."""

    #: Raise a throttled online container's quota while the node is idle.
    enabled: bool = False
    max_quota_burst_percent: int = Field(default=300, ge=101, le=1000)  # of the container's own quota
    step_percent: int = Field(default=25, ge=1, le=100)  # of its own quota, added per pass
    throttled_ratio: float = Field(default=0.1, gt=0, le=1)  # throttled periods / periods that asks for more
    node_safe_usage: float = Field(default=0.6, gt=0, le=1)  # node CPU busy / CPUs under which quota grows
    restore_after_seconds: float = Field(default=30.0, ge=0)  # quiet within its own quota that long: restored


class MemoryQosConfig(Strict):
    """memory.min/low and memory.high for online pods on cgroup v2 (agent/enforce/strategies/memory_qos.py)."""

    #: memory.min/low (and optionally memory.high) for online pods, cgroup v2 only.
    enabled: bool = False
    protection: Literal["low", "min", "none"] = "low"  # low: reclaimed last; min: never reclaimed
    protect_percent: int = Field(default=100, ge=0, le=100)  # of the memory request
    high_percent: int = Field(default=0, ge=0, le=100)  # memory.high from the limit; 0: off


class NetworkQosConfig(Strict):
    """Egress limits of offline pods (agent/enforce/strategies/net_egress.py, docs/network-qos.md); off by default."""

    #: Hold offline pods' egress to a node budget with a token bucket in each pod's network namespace (needs
    #: collectors.pod_network).
    enabled: bool = False
    #: Bytes per second all offline pods together may send, split equally among them.
    offline_egress_bytes_per_second: int = Field(default=125_000_000, ge=1)
    #: Each offline pod's floor, bytes per second (a pod never gets less, even tightened).
    min_pod_bytes_per_second: int = Field(default=1_000_000, ge=1)
    #: Online traffic on the uplink (bytes/s sent by the node minus what offline pods send) above which the
    #: budget is tightened.
    online_high_bytes_per_second: int = Field(default=500_000_000, ge=1)
    #: Online traffic under which a tightened budget is released (hysteresis: below the high mark).
    online_low_bytes_per_second: int = Field(default=300_000_000, ge=0)
    #: The budget while tightened, percent of offline_egress_bytes_per_second.
    tightened_percent: int = Field(default=20, ge=1, le=100)
    #: The node's uplink interfaces; empty: every physical interface.
    uplinks: tuple[str, ...] = ()
    #: Passes between two checks of a limit that did not change (each check enters the pod's namespace; pods
    #: take turns).
    verify_every: int = Field(default=60, ge=1)

    @model_validator(mode="after")
    def _hysteresis(self) -> NetworkQosConfig:
        if self.online_low_bytes_per_second >= self.online_high_bytes_per_second:
            raise ValueError("network_qos.online_low_bytes_per_second must be below online_high_bytes_per_second")
        return self


class QosConfig(Strict):
    """What Colo does for online pods themselves: CPU burst and memory QoS (all off by default)."""

    cpu_burst: CpuBurstConfig = CpuBurstConfig()
    quota_burst: QuotaBurstConfig = QuotaBurstConfig()
    memory: MemoryQosConfig = MemoryQosConfig()
