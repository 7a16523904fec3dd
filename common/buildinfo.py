"""Which Colo this is: `--version` and the `colo_build_info` metric read the installed package's version."""

from __future__ import annotations

import platform
from functools import cache
from importlib import metadata

from prometheus_client.metrics_core import Metric

from common.families import Family

#: the distribution's name in pyproject.toml ("colo" on the package index is an unrelated project)
DISTRIBUTION = "colo-k8s"

BUILD_INFO = Family(
    "colo_build_info",
    "Always 1; the labels say which Colo program and version is running.",
    ("program", "version", "python_version"),
)


@cache
def version() -> str:
    """The installed distribution's version: DISTRIBUTION's, else that of whichever distribution ships these
    modules (a venv installed before the rename, or a repackaging); "unknown" from a tree never installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    for name in metadata.packages_distributions().get(__name__.partition(".")[0], []):  # scans every distribution
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def version_line(prog: str) -> str:
    return f"{prog} {version()} (Python {platform.python_version()})"


def build_info(program: str) -> Metric:
    """`colo_build_info{program, version, python_version} 1`, as Prometheus' own `*_build_info` series."""
    family = BUILD_INFO.metric()
    family.add_metric([program, version(), platform.python_version()], 1)
    return family
