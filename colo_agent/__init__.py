"""The `colo-agent` program: the one package above both the agent (`agent/`) and its HTTP face (`exporter/`),
so that neither imports the other's builder. Nothing is imported here."""
