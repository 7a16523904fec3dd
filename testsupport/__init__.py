"""Helpers shared by tests/ and bench/ (fake API server, cgroup trees, agent fleets, ...); never shipped."""
