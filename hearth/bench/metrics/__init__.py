"""Numbers from timed requests: percentiles (stats) and a concurrency level's summary (levels)."""
