"""The sections of colo-agent's configuration, by what reads them; agent/config.py nests them in `AgentConfig`
and loads it from file, environment and flags."""
