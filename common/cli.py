"""Command-line conventions both programs follow: every flag's help names its default and its `COLO_*`
variable, `--version`, `--log-level` and `--log-format`, and `--help` explains the variables."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any, NoReturn

from common.buildinfo import version_line
from common.config import env_name

#: Exit codes: done, a runtime failure, a configuration/address/kubeconfig problem (one line on stderr).
EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_CONFIG = 2

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


class OneLineParser(argparse.ArgumentParser):
    """A command-line mistake is one line too (argparse would print the whole usage first); exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


class Flags:
    """An argparse parser whose flags map to config keys; `flag_of[key]` names the flag in errors."""

    def __init__(self, prog: str, description: str, env_prefix: str, epilog: str = "") -> None:
        self.env_prefix = env_prefix
        self.flag_of: dict[str, str] = {}
        text = (
            f"Every setting can also come from a YAML file (--config) or an environment variable {env_prefix}<KEY> "
            f"(nested keys joined by '__', e.g. {env_prefix}POLLING__INTERVAL=10s for polling.interval). "
            "Precedence: flags, then variables, then the file, then the defaults. A bad value stops "
            "start-up with exit code 2 and names the flag, variable or key."
        )
        if env_prefix == "COLO_":
            text = text.replace("POLLING__INTERVAL=10s for polling.interval", "ENFORCEMENT__CPU_POLICY=cpuset")
        self.parser = OneLineParser(
            prog=prog,
            description=textwrap.fill(description, 100),
            epilog=f"{textwrap.fill(text, 100)}\n\n{epilog}".strip(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        self.parser.add_argument("--version", action="version", version=version_line(prog))

    def add(self, flag: str, key: str | None, help: str, *, shown_default: str | None = None, **kw: Any) -> None:
        """A flag for config `key` (None: a flag without a config key); the help gets default and variable."""
        notes = []
        if shown_default is not None:
            notes.append(f"default: {shown_default}")
        if key is not None:
            notes.append(f"env {env_name(self.env_prefix, key)}")
            self.flag_of[key] = flag
            kw.setdefault("dest", key)
        text = f"{help} ({'; '.join(notes)})" if notes else help
        self.parser.add_argument(flag, help=text, **kw)

    def add_logging(self) -> None:
        self.add("--log-level", "log_level", "log threshold", shown_default="info", choices=LOG_LEVELS)
        self.add(
            "--log-format",
            "log_format",
            "'json': one JSON object per line, for log pipelines",
            shown_default="text",
            choices=LOG_FORMATS,
        )
