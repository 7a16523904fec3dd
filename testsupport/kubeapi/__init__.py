"""A fake Kubernetes API server for tests: real paths, verbs, Status errors, watches and fault injection."""

from testsupport.kubeapi.server import FakeKubeAPI, Fault, RecordedRequest

__all__ = ["FakeKubeAPI", "Fault", "RecordedRequest"]
