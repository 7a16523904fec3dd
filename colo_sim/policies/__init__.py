"""The policies colo-sim compares. Each is a small pure module: from one node's trace it computes, at every step
and from data up to that step only, the capacity it lends to batch (cores, bytes).

A runner returns {policy name: (cpu per step, memory per step)}; `colo` computes two policies in one replay
(the batch-resource model's number and the annotation model's), so runners, not policies, are listed here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (numpy's types: colo-sim's --help and flags are read without numpy)
    from colo_sim.measures import Series
    from colo_sim.timeline import NodeTrace, Timeline

#: Capacity lent per step: (cpu cores, memory bytes), each a list or a numpy array.
Lending = tuple["Series", "Series"]
Runner = Callable[["NodeTrace", "Timeline"], dict[str, Lending]]

#: The policies in the order of the output.
POLICY_NAMES = ("colo", "colo-annotation", "oracle", "koordinator", "volcano", "nsigma", "percentile", "max")
