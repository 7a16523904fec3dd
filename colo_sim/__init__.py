"""colo-sim: replay per-pod usage through Colo's capacity code (placeholder until the simulator lands)."""
