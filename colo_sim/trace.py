"""One observation of one pod: the record every trace reader yields and the replay consumes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sample:
    node: str
    pod: str
    unix_s: float
    cpu_request_cores: float
    cpu_usage_cores: float
    memory_request_bytes: float
    memory_usage_bytes: float
