"""Colo's exporter: Prometheus metrics (cached render), health, and the JSON API over the AgentView.

Layout: `exporter.snapshot_metrics` (metric families of one snapshot), `exporter.stats` (window statistics per
snapshot, shared by metrics and API), `exporter.render` (the /metrics render cache and its worker thread),
`exporter.encoding` (the bodies of one render: text, OpenMetrics, gzip), `exporter.api` (JSON documents),
`exporter.app` (the app factory `create_app`, Starlette or, for `serving.api_docs`, FastAPI, and the uvicorn
helpers `make_server` / `serve`). Nothing is imported here, so importing one module does not pull in the web
stack.
"""
