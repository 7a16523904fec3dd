"""colo-sim: replays pods' usage traces through the agent's own capacity code and its peers' formulas."""
