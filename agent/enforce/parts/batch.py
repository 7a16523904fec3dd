"""Batch pods' own limits (kubernetes.io/batch-*): kubelet's values, written until they hold, never recorded
and never put back."""

from __future__ import annotations

from agent.enforce.parts.registry import register
from agent.enforce.parts.spec import PartSpec

NAME = "batch"
SPEC = PartSpec(NAME, "own")
register(SPEC, order=80)
