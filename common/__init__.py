"""What both programs share at their edges: configuration layers, command lines, logging, listening sockets
and build information. It imports neither `agent`, `exporter`, `controller` nor `kube`, so the controller
can use it without loading the agent."""
