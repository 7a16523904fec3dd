"""Load-aware rebalancing: move pods off hot nodes so the scheduler can place them on cold ones.

One module per step of the algorithm (issue 12), each pure and table-tested: `usage` (1), `classify` (2),
`anomaly` (3), `budget` (4), `candidates` (5), `fit` (6), `plan` (7); `facts` slims Node and Pod objects
to what those steps read, `agentpods` polls the agents' per-pod usage, `actuator` wires it all into the
controller's cycle (Evictions, Events, metrics, the served plan). Kept import-free so that
`controller.config` can import `rebalance.settings` without cycles.
"""
