"""Start-up errors that must stop the controller with exit code 2 and name the offending key.

The error class and the key-path spelling are the shared ones of `common.config` (one mechanism for both
programs); this module keeps the policy's own error shape.
"""

from __future__ import annotations

from pydantic import ValidationError

from common.config import ConfigError, loc_to_path

__all__ = ["ConfigError", "from_validation_error", "loc_to_path"]


def from_validation_error(err: ValidationError, source: str, prefix: str = "") -> ConfigError:
    """One clause per problem, each starting with the full key path."""
    lines = []
    for e in err.errors():
        msg = str(e.get("msg", "invalid"))
        if e.get("type") == "extra_forbidden":
            msg = "unknown field"
        msg = msg.removeprefix("Value error, ")
        lines.append(f"{loc_to_path(e['loc'], prefix)}: {msg}")
    return ConfigError(f"{source}: " + "; ".join(lines))
