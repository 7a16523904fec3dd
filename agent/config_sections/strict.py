"""The base of every configuration section: unknown keys are errors, and a loaded configuration never changes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
