"""Decisions as pure functions of the pass's state (koordlet's qosmanager keeps one strategy per file the
same way): no I/O, no clock, so each is table-tested on its own. The enforcer and the evictor call them and
carry out what they decide through their executors.

- `cpu_quota`: the offline CPU budget, its split, each pod's and container's quota, the best-effort tier cap;
- `release`: offline pods released to their own limits while the node is quiet (with hysteresis);
- `memory_high`: offline pods' memory.high under what the high watermark leaves;
- `eviction_choice`: which offline pods to evict, in which order, and the usage that leaves.

The budget arithmetic and the cpuset choice are the pure functions of `agent/cpu_budget.py`; online pods'
CFS burst and memory QoS are the pure decisions of `agent/qos/`.
"""
