"""Act on cgroups: the enforcement stage of a pass (`stage`), what it reads (`inputs`), the pure strategies
(`strategies/`) and the parts they change (`parts/`), the action vocabulary and the one executor, the ledger
of originals and putting them back, and the `enforcement` and `qos` reports."""
