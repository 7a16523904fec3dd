"""The cluster link: the agent's pipeline with the API server (watch this node's pods and Node, classify pods,
publish) and the one thread that writes the Node (`node_writer`). Only in cluster mode."""
