"""colo-controller's extender app alone (no cluster), served the production way in its own process, for
tests and benchmarks that measure a real server: `python -m testsupport.extender_server '<serving JSON>' MAX_BODY`.
Prints the bound port on its first line; stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

from controller.config import ClassifySettings
from controller.extender import Extender, create_app
from controller.metrics import ControllerMetrics
from controller.policy import default_policy
from controller.scoring import ScoreBoard, Scorer
from serving.server import make_server
from serving.settings import ServingSettings


async def main(settings: ServingSettings, max_body_bytes: int) -> None:
    extender = Extender(ScoreBoard(Scorer(default_policy().spec)), ClassifySettings())
    app = create_app(extender, ControllerMetrics(), max_body_bytes=max_body_bytes, serving=settings)
    server = make_server(app, "127.0.0.1", 0, settings)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, server.stop)
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    print(server.bound_port, flush=True)
    await task
    server.close()


if __name__ == "__main__":
    asyncio.run(main(ServingSettings.model_validate(json.loads(sys.argv[1])), int(sys.argv[2])))
