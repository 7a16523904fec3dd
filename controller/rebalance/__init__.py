"""Load-aware rebalancing: move pods off hot nodes so the scheduler can place them on cold ones.

One module per step of the algorithm (issue 12), each pure and table-tested: `usage` (1), `node_levels` (2),
`anomaly` (3), `budget` (4), `candidates` (5, pod selectors from common.label_selector), `fit` (6, with
`node_affinity`), `plan` (7). `assess` runs steps 1-4 and `cycle` steps 5-7 for one cycle; `traits` cuts
Node and Pod objects down to what the steps read (in the informers' transforms); `agentpods` polls the
sources' agents for per-pod usage; `actuator` wires it into the controller's cycle (Evictions, Events, state
across cycles); `report` renders the plan served at /api/v1/rebalance; `metrics` and `settings` (the
`rebalance` config section) complete it. Kept import-free so that `controller.config` can import
`rebalance.settings` without cycles.
"""
