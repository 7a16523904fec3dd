"""`colo-agent` entry point: configuration errors exit 2, everything else runs until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from agent.config import ConfigError, load_config
from cgroup import CgroupError


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as exc:
        print(f"colo-agent: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    from agent.runtime import Agent, serve

    in_cluster = False
    try:
        agent = Agent(config, in_cluster=in_cluster)
    except (CgroupError, ValueError) as exc:
        print(f"colo-agent: cannot read this host's cgroups: {exc}", file=sys.stderr)
        return 1
    host, port = config.listen_address(in_cluster)
    asyncio.run(serve(agent, host, port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
