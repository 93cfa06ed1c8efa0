"""The speculative-decoding benchmark's parts (benchmarks/bench_spec.py is the thin script):

prompts -> variants (engine + config -> server command) -> servers (process lifetime) ->
client (one streamed request, counters) -> rows (records, ratios, equality) -> table."""
