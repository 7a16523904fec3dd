"""Decisions as pure functions of the pass's state (koordlet's qosmanager keeps one strategy per file the
same way): no I/O, no clock, so each is table-tested on its own. The enforcer and the evictor call them and
carry out what they decide through their executors.

- `release`: offline pods released to their own limits while the node is quiet (with hysteresis);
- `memory_high`: offline pods' memory.high under what the high watermark leaves;
- `eviction_choice`: which offline pods to evict, in which order, and the usage that leaves.

The CPU budget, its split and the cpuset choice are pure functions of `agent/cpu_budget.py`.
"""
