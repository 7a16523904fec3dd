"""Decisions as pure functions of the pass's state (koordlet's qosmanager keeps one strategy per file the
same way): no I/O, no clock, so each is table-tested on its own. Strategies import the cgroup parts they
write (agent/enforce/parts/); nothing below them imports a strategy (tests/test_layout.py).

The enforcement strategies (`registry.py`: the protocol and the registry, the one list the enforcement stage
runs; importing this package imports every module in it, and each strategy's module registers it with its
place in the order actions are applied, so a new strategy is one new module here):
- `baseline`: offline pods' minimum weight, SCHED_IDLE and oom_score_adj, re-applied on a period;
- `cpu_suppression`: CPU suppression whole: the budget, its split, the release of a quiet node (hysteresis,
  confirm passes) and the two CPU policies, `CfsQuota` (pod and container quotas, the best-effort tier cap)
  and `Cpuset`;
- `memory_high`: offline pods' memory.high under what the high watermark leaves (cgroup v2);
- `batch_limits`: batch pods' own limits (kubelet's values from kubernetes.io/batch-*), never restored;
- `reconcile`: what goes back (gone pods, pods no longer offline, parts no active strategy owns);
- `cpu_burst`, `quota_burst`, `memory_qos`: online pods' CFS burst, dynamic quota burst and memory QoS, each
  with its decisions (`online` picks the online pods and the quotas their specs give them).

Which offline pods the evictor evicts is decided in agent/evict/choice.py, beside the evictor.
"""

from common.plugins import import_modules

import_modules(__name__, __path__, skip=("registry",))
