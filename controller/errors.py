"""Start-up errors that must stop the controller with exit code 2 and name the offending key."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError


class ConfigError(Exception):
    """A bad setting or policy: the message names the key (`spec.predicate[1].maxLimitPecent: ...`)."""


def loc_to_path(loc: Sequence[int | str], prefix: str = "") -> str:
    """Turn a pydantic error location into `a.b[2].c`, the way users write YAML keys."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out or "<root>"


def from_validation_error(err: ValidationError, source: str, prefix: str = "") -> ConfigError:
    """One line per problem, each starting with the full key path."""
    lines = []
    for e in err.errors():
        msg = str(e.get("msg", "invalid"))
        if e.get("type") == "extra_forbidden":
            msg = "unknown field"
        msg = msg.removeprefix("Value error, ")
        lines.append(f"{loc_to_path(e['loc'], prefix)}: {msg}")
    return ConfigError(f"{source}: " + "; ".join(lines))
