"""`hearth bench`: measure an engine under a seeded workload — the in-process engine or any
OpenAI-compatible server — and report physics beside the latencies: tokens/s against the decode
ceiling that `hearth plan` predicts, peak memory, and greedy agreement with a reference run.

workloads -> (local_client | http_client) -> harness -> metrics -> report + charts."""

from hearth.errors import HearthError


class BenchError(HearthError):
    """A benchmark that cannot run as asked: unknown workload, impossible numbers, unreachable server."""
