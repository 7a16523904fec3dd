"""Typed models of the agent's JSON documents, `GET /api/v1/node` and `GET /api/v1/pods`.

The agent builds these documents as plain dicts (exporter.api; fast, no model in its process); these
models describe them, and the controller parses what an agent answers with them. Every field the agent
writes is required (a renamed or missing key is an error, never a silent 0); keys the models do not know
are ignored, so a newer agent may add some. Every number is checked for type, finiteness and range:
ratios lie in 0..1 (up to `RATIO_TOLERANCE` beyond is accepted, and the reader brings the values it uses
back with `clamp_ratio`: a Python validator on every field would cost more than the whole parse), byte
counts are integers, nothing is NaN or infinite, and what a node uses or lends is bounded by what it has.
A document that fails is rejected whole with `DocumentRejected`, whose `reason` is one of `REASONS`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from contract.windows import NODE_WINDOW_KEYS, POD_WINDOW_FIELD, WINDOW_NAMES

#: How far a ratio may stray outside 0..1 (float rounding, a counter read a little late) before the
#: document is rejected; within it the value is clamped into 0..1.
RATIO_TOLERANCE = 0.01
#: Upper bound of every byte count (Kubernetes quantities are int64).
MAX_BYTES = (1 << 63) - 1
#: Upper bound of a network rate: 10 TB/s, far above any NIC.
MAX_BYTES_PER_SECOND = 1e13
#: Upper bound of any CPU figure: more cores than any node has.
MAX_CORES = 1e6

#: Why a document was rejected (the label of the controller's rejection counter).
REASONS = ("not_json", "not_object", "missing_field", "wrong_type", "not_finite", "out_of_range", "wrong_node")

_TYPE_ERRORS = frozenset(
    {
        "float_type",
        "int_type",
        "bool_type",
        "string_type",
        "dict_type",
        "list_type",
        "model_type",
        "literal_error",
        "none_required",
        "model_attributes_type",
        "union_tag_invalid",
        "int_from_float",
        "float_parsing",
        "int_parsing",
    }
)
_RANGE_ERRORS = frozenset(
    {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "string_too_long", "string_pattern_mismatch"}
)


def json_number(x: float | None) -> float | None:
    """A number as the agent writes it into a document: None for unknown, NaN or infinite (JSON has no NaN)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def clamp_ratio(value: float) -> float:
    """A ratio the model accepted (within RATIO_TOLERANCE of 0..1), into 0..1."""
    return min(1.0, max(0.0, value))


Ratio = Annotated[float, Field(ge=-RATIO_TOLERANCE, le=1.0 + RATIO_TOLERANCE)]
Cores = Annotated[float, Field(ge=0.0, le=MAX_CORES)]
Bytes = Annotated[int, Field(ge=0, le=MAX_BYTES)]
Rate = Annotated[float, Field(ge=0.0, le=MAX_BYTES_PER_SECOND)]
Finite = Annotated[float, Field(ge=-MAX_BYTES, le=MAX_BYTES)]


def _out_of_range(message: str) -> PydanticCustomError:
    return PydanticCustomError("out_of_range", message)


class _Model(BaseModel):
    # strict: a string, a bool or a float where an integer belongs is a wrong type, never coerced
    model_config = ConfigDict(strict=True, allow_inf_nan=False, frozen=True, extra="ignore")


class Window(_Model):
    """One node window: a usage ratio (null: no data yet) and how much of the window's span it covers."""

    value: Ratio | None
    coverage: Ratio


class PodWindow(_Model):
    """One pod window: in the unit of the pod's own field (cores, bytes)."""

    value: Annotated[float, Field(ge=0.0, le=MAX_BYTES)] | None
    coverage: Ratio


class Pressure(_Model):
    """PSI avg10 as ratios (null where the kernel has no `full` line)."""

    some: Ratio | None
    full: Ratio | None


class InterfaceRates(_Model):
    physical: bool
    receive_bytes_per_second: Rate | None
    transmit_bytes_per_second: Rate | None


class NetworkTotal(_Model):
    receive_bytes_per_second: Rate | None
    transmit_bytes_per_second: Rate | None


class Network(_Model):
    interfaces: dict[str, InterfaceRates]
    total: NetworkTotal


class CapacityDetail(_Model):
    """The computation behind one published capacity (agent.capacity.lendable), in `unit` (cores or bytes)."""

    allocatable: Finite
    reclaimable: Finite
    headroom: Finite
    system_usage: Finite
    online_peak: Finite
    online_request: Finite
    oversubscription: Finite
    unit: str


class BatchResource(_Model):
    """One batch resource (agent/capacity/batch_floor.py) in `unit` (millicores or bytes): the published
    allocatable, Σ batch requests of the node's pods (allocated), and free = allocatable − allocated (negative
    when over-allocated)."""

    allocatable: Bytes
    allocated: Bytes
    free: Annotated[int, Field(ge=-MAX_BYTES, le=MAX_BYTES)]
    usage: Bytes
    above_requests: Bytes | None = None  # memory only: working set above the batch-memory requests
    unit: Literal["millicores", "bytes"]

    @model_validator(mode="after")
    def _free_is_the_difference(self) -> BatchResource:
        if self.free != self.allocatable - self.allocated:
            raise _out_of_range(f"batch free {self.free} is not allocatable {self.allocatable} − allocated")
        return self


class Batch(_Model):
    """How the published batch capacity relates to the batch pods already on the node."""

    pods: Bytes
    cpu: BatchResource
    memory: BatchResource


class Oversubscription(_Model):
    """The agent's oversubscription state: `enabled` false or null (label off, no Node yet, standalone)
    carries only the reason; enabled carries the published numbers, and the computation once there is one."""

    enabled: bool | None
    reason: str
    types: list[Literal["cpu", "memory"]] | None = None
    cpu_millicores: Annotated[int, Field(ge=0, le=int(MAX_CORES * 1000))] | None = None
    memory_bytes: Bytes | None = None
    cpu: CapacityDetail | None = None
    memory: CapacityDetail | None = None
    extended_resources: bool | None = None  # also advertised as kubernetes.io/batch-* in node status
    batch: Batch | None = None
    # issue 22: the floor of the batch resources (Σ batch requests of the node's pods: "cpu" milli-cores,
    # "memory" bytes; null while the pod list is not known), this pass's unsmoothed batch allocatable, and the
    # resources under pressure (a drop of their capacity is written at once)
    floor: dict[Literal["cpu", "memory"], Bytes] | None = None
    computed: dict[Literal["cpu", "memory"], Bytes] | None = None
    pressure: list[Literal["cpu", "memory"]] | None = None

    @model_validator(mode="after")
    def _published_when_enabled(self) -> Oversubscription:
        if self.enabled:
            for name in ("types", "cpu_millicores", "memory_bytes"):
                if getattr(self, name) is None:
                    raise PydanticCustomError("missing", "{name}: required while enabled", {"name": name})
            pairs = ((self.cpu, self.cpu_millicores, 1000), (self.memory, self.memory_bytes, 1))
            for detail, published, scale in pairs:
                if detail is not None and published is not None and published > detail.allocatable * scale + 1:
                    alloc = f"{detail.allocatable:g} {detail.unit}"
                    raise _out_of_range(f"published {published} exceeds allocatable {alloc}")
        return self


#: RFC 3339 in UTC, as the agent writes it (`2026-11-22T10:00:00.000Z`).
Timestamp = Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$")]


class NodeDocument(_Model):
    """`GET /api/v1/node`."""

    node_name: Annotated[str, Field(max_length=253)] | None  # a Node's name is a DNS subdomain
    cpu_capacity_cores: Annotated[float, Field(gt=0.0, le=MAX_CORES)]
    cpu_cores: Cores | None
    cpu_usage_ratio: Ratio | None
    memory_total_bytes: Bytes
    memory_used_bytes: Bytes
    memory_usage_ratio: Ratio
    memory_page_cache_bytes: Bytes
    pressure: dict[str, Pressure]
    network: Network
    windows: dict[str, Window]
    units: dict[str, str]
    timestamp: Timestamp
    seq: Bytes
    oversubscription: Oversubscription
    enforcement: dict[str, Any]  # the agent's enforcement and eviction state: diagnostics, read by nobody
    # online QoS (CPU burst, quota burst, memory QoS): diagnostics; {} from an agent older than the section
    qos: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> NodeDocument:
        missing = [k for k in NODE_WINDOW_KEYS if k not in self.windows]
        if missing:
            raise PydanticCustomError("missing", "windows.{key}: Field required", {"key": missing[0]})
        cap = self.cpu_capacity_cores
        if self.cpu_cores is not None and self.cpu_cores > cap * (1.0 + RATIO_TOLERANCE):
            raise _out_of_range(f"cpu_cores {self.cpu_cores:g} exceeds cpu_capacity_cores {cap:g}")
        for name in ("memory_used_bytes", "memory_page_cache_bytes"):
            if getattr(self, name) > self.memory_total_bytes:
                raise _out_of_range(f"{name} exceeds memory_total_bytes {self.memory_total_bytes}")
        over = self.oversubscription
        if over.cpu_millicores is not None and over.cpu_millicores > cap * 1000:
            raise _out_of_range(f"oversubscription.cpu_millicores {over.cpu_millicores} exceeds {cap:g} cores")
        if over.memory_bytes is not None and over.memory_bytes > self.memory_total_bytes:
            raise _out_of_range(f"oversubscription.memory_bytes {over.memory_bytes} exceeds memory_total_bytes")
        return self


class ContainerUsage(_Model):
    id: str
    cpu_cores: Cores | None
    memory_working_set_bytes: Bytes
    memory_anon_bytes: Bytes
    cpu_throttled_ratio: Ratio | None


class PodBatchResources(_Model):
    """A batch pod's `kubernetes.io/batch-*` totals as the scheduler accounts them (milli-cores, bytes;
    null: not every container has that limit) and why the agent does not write them (empty: it does)."""

    cpu_request_millicores: Annotated[int, Field(ge=0, le=int(MAX_CORES * 1000))]
    cpu_limit_millicores: Annotated[int, Field(ge=0, le=int(MAX_CORES * 1000))] | None
    memory_request_bytes: Bytes
    memory_limit_bytes: Bytes | None
    problems: list[str]


class PodNetwork(_Model):
    """A pod's own network namespace, interfaces together (collectors.pod_network); `host_network`: it has
    none, its traffic is the node's (rates null)."""

    host_network: bool
    receive_bytes_per_second: Rate | None
    transmit_bytes_per_second: Rate | None


class DiskRates(_Model):
    """A pod's I/O on one block device (null: no rate yet)."""

    read_bytes_per_second: Rate | None
    write_bytes_per_second: Rate | None
    reads_per_second: Rate | None
    writes_per_second: Rate | None


class PodRunQueue(_Model):
    """What a pod's threads felt since its previous reading (collectors.run_queue; null: not known yet)."""

    delay_seconds_per_second: Annotated[float, Field(ge=0.0)] | None
    wait_ratio: Ratio | None
    cpu_stall_seconds_per_second: Annotated[float, Field(ge=0.0)] | None  # cgroup v2 with PSI only
    memory_stall_seconds_per_second: Annotated[float, Field(ge=0.0)] | None  # cgroup v2 with PSI only
    threads: Annotated[int, Field(ge=0)]


class PodUsage(_Model):
    """One entry of `GET /api/v1/pods` (the whole document is a list of them). `batch` is null for a pod
    without batch resources, and absent from an older agent's document."""

    model_config = ConfigDict(populate_by_name=True)

    namespace: str | None
    name: str | None
    uid: str
    qos: str
    pod_class: str = Field(alias="class")
    cpu_cores: Cores | None
    memory_working_set_bytes: Bytes
    memory_anon_bytes: Bytes
    cpu_throttled_ratio: Ratio | None
    containers: list[ContainerUsage]
    windows: dict[str, dict[str, PodWindow]]
    batch: PodBatchResources | None = None
    network: PodNetwork | None = None  # null unless collectors.pod_network is on; absent from an older agent
    # by device 'MAJ:MIN' while the agent's disk collector is on; null while it is off, absent from older agents
    disk: dict[str, DiskRates] | None = None
    run_queue: PodRunQueue | None = None  # null while collectors.run_queue is off; absent from an older agent

    @model_validator(mode="after")
    def _known_windows(self) -> PodUsage:
        fields = set(POD_WINDOW_FIELD.values())
        for name, by_field in self.windows.items():
            if name not in WINDOW_NAMES or not set(by_field) <= fields:
                raise PydanticCustomError("out_of_range", "windows.{name}: not a window of the agent", {"name": name})
        return self


#: `GET /api/v1/pods`: a list of PodUsage.
PODS_DOCUMENT: TypeAdapter[list[PodUsage]] = TypeAdapter(list[PodUsage], config=None)


class DocumentRejected(ValueError):
    """An agent's document that cannot be trusted; `reason` is one of REASONS, the message says where."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _rejection(err: ValidationError) -> DocumentRejected:
    first = err.errors(include_url=False)[0]
    kind = first["type"]
    where = ".".join(str(p) for p in first["loc"])
    detail = f"{where}: {first['msg']}" if where else first["msg"]
    if kind == "json_invalid":
        return DocumentRejected("not_json", detail)
    if kind == "missing":
        return DocumentRejected("missing_field", detail)
    if kind == "finite_number":
        return DocumentRejected("not_finite", detail)
    if kind in _RANGE_ERRORS or kind == "out_of_range":
        return DocumentRejected("out_of_range", detail)
    if kind in _TYPE_ERRORS:
        return DocumentRejected("not_object" if not first["loc"] else "wrong_type", detail)
    return DocumentRejected("wrong_type", f"{detail} ({kind})")


def parse_node_document(body: bytes | str) -> NodeDocument:
    """The agent's /api/v1/node answer, validated; DocumentRejected when any field cannot be trusted."""
    try:
        return NodeDocument.model_validate_json(body)
    except ValidationError as err:
        raise _rejection(err) from None


def parse_pods_document(body: bytes | str) -> list[PodUsage]:
    """The agent's /api/v1/pods answer, validated; DocumentRejected as for the node document."""
    try:
        return PODS_DOCUMENT.validate_json(body, strict=True)
    except ValidationError as err:
        raise _rejection(err) from None
