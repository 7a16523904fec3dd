"""Decisions as pure functions of the pass's state (koordlet's qosmanager keeps one strategy per file the
same way): no I/O, no clock, so each is table-tested on its own.

The enforcement strategies (`registry.py`: the protocol and the one list the enforcement stage runs):
- `baseline`: offline pods' minimum weight, SCHED_IDLE and oom_score_adj, re-applied on a period;
- `cfs_quota`: the cfsQuota policy (budget, release, pod and container quotas, the best-effort tier cap);
- `cpuset`: the cpuset policy;
- `memory_high`: offline pods' memory.high under what the high watermark leaves (cgroup v2);
- `batch_limits`: batch pods' own limits (kubelet's values from kubernetes.io/batch-*), never restored;
- `reconcile`: what goes back (gone pods, pods no longer offline, parts no active strategy owns);
- `cpu_burst`, `quota_burst`, `memory_qos`: online pods' CFS burst, dynamic quota burst and memory QoS
  (`online` picks the online pods and the quotas their specs give them).

Their arithmetic: `cpu_quota` (budget, split, targets, tier cap), `release` (hysteresis), the pure
functions of `agent/cpu_budget.py`. `eviction_choice` decides which offline pods the evictor evicts; online
pods' CFS burst, quota burst and memory QoS decide in their strategy modules.
"""
