"""Remember: the rolling usage windows of every series (`store.WindowStore` is the front; the minute grid, one
series' feed and statistics, and persistence across restarts inside)."""
