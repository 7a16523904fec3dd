"""Colo's own capacity, computed by the agent's code (`agent.capacity.lendable.resource_capacity`) on the replayed node:
the window store is fed what the agent's sampler feeds it (the node's online usage, per pod too for the
`pod_peaks` predictor), one sample per trace step, and each step is one agent pass. Two policies come out of
one replay: `colo`, the number published as `kubernetes.io/batch-*` (the batch-resource model), and
`colo-annotation`, the one written in Volcano's `volcano.sh/oversubscription-*` annotations.

The parameters are the agent's (`agent.config.OversubscriptionConfig`, its defaults unless colo-sim is given
an agent configuration). A trace has no usage outside pods: system usage is 0 and its series is not fed.
"""

from __future__ import annotations

from agent.capacity.lendable import CapacityParams, OnlinePod, PodAges, resource_capacity
from agent.windows.grid import RAW_SPAN
from agent.windows.store import WindowStore, online_key
from colo_sim.policies import Lending
from colo_sim.timeline import NodeTrace, Timeline


def run(node: NodeTrace, timeline: Timeline, params: CapacityParams) -> dict[str, Lending]:
    store = WindowStore(max_gap=min(timeline.step, RAW_SPAN))
    ages = PodAges()
    per_pod = params.predictor == "pod_peaks"
    uids = node.pods
    batch: tuple[list[float], list[float]] = ([], [])
    annotation: tuple[list[float], list[float]] = ([], [])
    use_cpu, _ = node.sums("cpu")
    use_mem, _ = node.sums("memory")
    alloc_cpu, alloc_mem = node.cpu_cores, node.memory_bytes
    for k, step in enumerate(node.present):
        now = timeline.time(k)
        feed = [(online_key("cpu"), use_cpu[k]), (online_key("memory"), use_mem[k])]
        if per_pod:
            for p in step:
                feed.append((("pod", uids[p[0]], "cpu"), p[2]))
                feed.append((("pod", uids[p[0]], "memory"), p[4]))
        store.add_many(now, feed)
        ages.observe(now, (uids[p[0]] for p in step))
        cpu = resource_capacity(store, now, "cpu", alloc_cpu, 0.0,
                                [OnlinePod(uids[p[0]], p[1], p[2]) for p in step], ages, params)  # fmt: skip
        mem = resource_capacity(store, now, "memory", alloc_mem, 0.0,
                                [OnlinePod(uids[p[0]], p[3], p[4]) for p in step], ages, params)  # fmt: skip
        batch[0].append(cpu.batch)
        batch[1].append(mem.batch)
        annotation[0].append(cpu.oversubscription)
        annotation[1].append(mem.oversubscription)
    return {"colo": batch, "colo-annotation": annotation}
