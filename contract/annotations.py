"""Annotation and label keys Colo reads or writes, and whose they are (Volcano, crane, koordinator, Colo).

Keys only, no behaviour: the agent and the controller name the same key from here, so neither can rename
one without the other noticing.
"""

from __future__ import annotations

# ---- Volcano: pod QoS, node oversubscription and eviction (written by colo-agent on its own node)
#: Pod annotation: QoS level -7..7 or LC/HLS/LS/BE; negative means offline.
QOS_LEVEL = "volcano.sh/qos-level"
#: Node label: "true" turns oversubscription on for the node.
OVERSUBSCRIPTION_LABEL = "volcano.sh/oversubscription"
#: Node annotation: `cpu`, `memory` or `cpu,memory`, the types to publish.
OVERSUBSCRIPTION_TYPES = "volcano.sh/oversubscription-types"
#: Node annotations: oversubscribable capacity, integer milli-CPU and integer bytes (ASCII digits).
OVERSUBSCRIPTION_CPU = "volcano.sh/oversubscription-cpu"
OVERSUBSCRIPTION_MEMORY = "volcano.sh/oversubscription-memory"
#: Node annotation (`"true"`) and taint key while the node evicts offline pods.
OFFLINE_JOB_EVICTING = "volcano.sh/offline-job-evicting"
#: Pod annotations (Volcano agent's CPU burst): opt in or out of CFS burst, and the burst in µs per container.
ENABLE_QUOTA_BURST = "volcano.sh/enable-quota-burst"
QUOTA_BURST_TIME = "volcano.sh/quota-burst-time"
# ---- Colo: opt-in SLO feedback (agent/sense/slo_scrape.py), set on an online pod by its owner
#: Pod annotation: the name of a Prometheus histogram the pod exports of its request latency, in seconds
#: (`http_request_duration_seconds`: its `_bucket` series are read, every label set summed by `le`).
SLO_METRIC = "colo.io/slo-metric"
#: Pod annotation: the pod's p99 latency objective, seconds (a decimal number above 0, e.g. "0.05").
SLO_P99_SECONDS = "colo.io/slo-p99-seconds"
#: Pod annotation: the port of the pod's own IP serving the exposition (1-65535).
SLO_PORT = "colo.io/slo-port"
#: Pod annotation (optional): the path of the exposition, "/metrics" unless set.
SLO_PATH = "colo.io/slo-path"
#: The pod annotations the agent keeps in its pod records (everything else is dropped at the informer).
AGENT_POD_ANNOTATIONS = (ENABLE_QUOTA_BURST, QUOTA_BURST_TIME, SLO_METRIC, SLO_P99_SECONDS, SLO_PORT, SLO_PATH)


def evicting_watermark(resource: str, level: str) -> str:
    """`volcano.sh/evicting-{cpu,memory}-{high,low}-watermark`: integer percent of allocatable."""
    return f"volcano.sh/evicting-{resource}-{level}-watermark"


# ---- Kubernetes extended resources (node status): the batch-resource model's numbers (agent/capacity/lendable.py)
#: Node status capacity and allocatable (written by colo-agent), pod requests and limits (read by both; a
#: colocation profile converts cpu/memory to them): batch CPU in integer milli-cores.
BATCH_CPU = "kubernetes.io/batch-cpu"
#: The same for batch memory, in integer bytes.
BATCH_MEMORY = "kubernetes.io/batch-memory"

# ---- koordinator
#: Pod label: `BE` means offline.
KOORD_QOS_CLASS = "koordinator.sh/qosClass"
#: Pod label the agent aggregates usage by, by default (koordinator's elastic quota name).
KOORD_QUOTA_NAME = "quota.scheduling.koordinator.sh/name"

# ---- crane-scheduler (written by colo-controller): the load metrics are named by contract.windows
#: Node annotation: crane's hot value, `"<value>,<UTC time>"`.
HOT_VALUE = "node_hot_value"

# ---- Colo's own (written by colo-controller)
#: Node annotation: the crane score 0..100 and when it was computed, `"<score>,<UTC time>"`.
LOAD_SCORE = "colo.io/load-score"
#: Deprecated node annotation `"<cpu millicores>,<memory bytes>,<UTC time>"`: the controller's copy of the
#: agent's oversubscription annotations. Written only with the controller's
#: `legacy_oversubscription_annotation: true`; otherwise removed from the nodes the controller writes.
LEGACY_OVERSUBSCRIPTION = "colo.io/oversubscription"
