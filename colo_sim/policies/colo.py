"""Colo's own capacity, computed by the agent's code (`agent.capacity.lendable.resource_capacity`) on the replayed
node: the window store is fed what the agent's sampler feeds it (the node's online usage, and each pod's own
usage when the configured predictor reads per-pod series), one sample per trace step, and each step is one
agent pass, with the agent's young-pod ages, cold-start rule and learned margins. Two policies come out of one
replay: `colo`, the number published as `kubernetes.io/batch-*` (the batch-resource model), and
`colo-annotation`, the one written in Volcano's `volcano.sh/oversubscription-*` annotations. The paper's
predictors (`nsigma`, `percentile`, `max`) are the same replay with their predictor (`paper`).

The parameters are the agent's (`agent.config_sections.lending.OversubscriptionConfig`, its defaults unless
colo-sim is given an agent configuration). A trace has no usage outside pods: system usage is 0 and its series is
not fed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from agent.capacity.lendable import RESOURCES, CapacityParams, OnlinePod, PodAges, margins, resource_capacity
from agent.capacity.predictors import registry
from agent.capacity.predictors.registry import Prediction, pod_key
from agent.node_state import Resource
from agent.windows.grid import RAW_SPAN
from agent.windows.store import WindowStore, online_key
from colo_sim.policies import Lending
from colo_sim.timeline import NodeTrace, Timeline

#: Each resource with its columns in a `PodStep` (request, usage).
_COLUMNS: tuple[tuple[Resource, int, int], ...] = (("cpu", 1, 2), ("memory", 3, 4))


def paper(predictor: str) -> CapacityParams:
    """A paper predictor as Bashir et al. lend by it: max(0, allocatable − peak), no margin, trusted from its
    first 5-minute sample (not the agent's hour)."""
    return CapacityParams(
        cpu_reclaim_ratio=1.0,
        memory_reclaim_ratio=1.0,
        predictor=predictor,
        trust_seconds=0.0,
        margin=None,
        min_history_seconds=300.0,
    )


def run(
    node: NodeTrace,
    timeline: Timeline,
    params: CapacityParams,
    names: tuple[str, str | None] = ("colo", "colo-annotation"),
) -> dict[str, Lending]:
    """{names[0]: the batch-resource model's number per step, names[1]: the annotation model's (if named)}."""
    return run_many(node, timeline, [(params, names)])


def run_many(
    node: NodeTrace, timeline: Timeline, runs: Sequence[tuple[CapacityParams, tuple[str, str | None]]]
) -> dict[str, Lending]:
    """Several settings replayed over one window store (fed once, each pod's series too when one of them reads
    them): each setting's numbers are what its own replay would give, as the store does not depend on them.
    Settings that differ only in their predictors share each step's predictions (`Reading.shared`)."""
    store = WindowStore(max_gap=min(timeline.step, RAW_SPAN))
    ages = PodAges()
    learned = [margins(params, store) for params, _ in runs]
    per_pod = any(registry.spec(params.predictor_for(r)).per_pod for params, _ in runs for r in RESOURCES)
    uids = node.pods
    batch: list[tuple[list[float], list[float]]] = [([], []) for _ in runs]
    annotation: list[tuple[list[float], list[float]]] = [([], []) for _ in runs]
    use_cpu, _ = node.sums("cpu")
    use_mem, _ = node.sums("memory")
    alloc = {"cpu": node.cpu_cores, "memory": node.memory_bytes}
    plain = [replace(params, predictor=None, cpu_predictor="", memory_predictor="") for params, _ in runs]
    share = len(runs) > 1 and all(p == plain[0] for p in plain)
    online_cpu, online_memory = online_key("cpu"), online_key("memory")
    cpu_keys = [pod_key(uid, "cpu") for uid in uids]  # (made once: a key per pod and step is a tuple per sample)
    memory_keys = [pod_key(uid, "memory") for uid in uids]
    for k, step in enumerate(node.present):
        now = timeline.time(k)
        feed = [(online_cpu, use_cpu[k]), (online_memory, use_mem[k])]
        if per_pod:
            for p in step:
                i = p[0]
                feed.append((cpu_keys[i], p[2]))
                feed.append((memory_keys[i], p[4]))
        store.add_many(now, feed)
        ages.observe(now, (uids[p[0]] for p in step))
        for j, (resource, ri, ui) in enumerate(_COLUMNS):
            pods = [OnlinePod(uids[p[0]], p[ri], p[ui]) for p in step]
            shared: dict[str, Prediction] | None = {} if share else None
            for i, (params, _) in enumerate(runs):
                margin = learned[i]
                cap = resource_capacity(
                    store,
                    now,
                    resource,
                    alloc[resource],
                    0.0,
                    pods,
                    ages,
                    params,
                    None if margin is None else margin[resource],
                    shared,
                )
                batch[i][j].append(cap.batch)
                annotation[i][j].append(cap.oversubscription)
    out: dict[str, Lending] = {}
    for i, (_, (batch_name, annotation_name)) in enumerate(runs):
        out[batch_name] = batch[i]
        if annotation_name is not None:
            out[annotation_name] = annotation[i]
    return out


def run_paper(node: NodeTrace, timeline: Timeline, policies: Mapping[str, str]) -> dict[str, Lending]:
    """The paper's predictors replayed through the agent's code in one replay: {policy: predictor}."""
    return run_many(node, timeline, [(paper(predictor), (policy, None)) for policy, predictor in policies.items()])
