"""What colo-agent and colo-controller agree on, in one place both import: window names, annotation and
label keys, the online/offline rules, and typed models of the agent's JSON documents.

Nothing here imports `agent/`, `exporter/`, `controller/` or the Kubernetes client, so loading the contract
loads neither program. `contract.agent_api` (pydantic models) is imported only where a document is parsed.
"""
