"""Sense: one sampling pass reads the node and every pod (the sampler and its registered collectors, the pass
clock, the pod source, counters to rates, /proc, sysfs and pod network namespaces). Nothing here decides."""
