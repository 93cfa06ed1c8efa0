"""Prometheus metrics, named like vLLM's (`vllm:` -> `hearth:`), in a registry per app.

Counters and latency histograms are updated as outputs stream out; engine state (running and
waiting requests, KV blocks, prefix-cache counts) is read from AsyncEngine.stats() at scrape time."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# vLLM's buckets for TTFT and inter-token latency (vllm/v1/metrics/loggers.py)
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class Metrics:
    def __init__(self, model_name: str, engine):
        disable_created_metrics()  # no `_created` series, as vLLM
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_name = model_name
        labels, reg = ["model_name"], self.registry
        self.prompt_tokens = Counter("hearth:prompt_tokens", "Prefill tokens processed.", labels, registry=reg)
        self.generation_tokens = Counter("hearth:generation_tokens", "Generation tokens processed.",
                                         labels, registry=reg)
        self.request_success = Counter("hearth:request_success", "Finished requests, by finish reason.",
                                       labels + ["finished_reason"], registry=reg)
        self.ttft = Histogram("hearth:time_to_first_token_seconds", "Time to first token.", labels,
                              buckets=_TTFT_BUCKETS, registry=reg)
        self.itl = Histogram("hearth:inter_token_latency_seconds", "Time between output tokens.", labels,
                             buckets=_ITL_BUCKETS, registry=reg)
        self.e2e = Histogram("hearth:e2e_request_latency_seconds", "Request latency, first byte in to "
                             "last token out.", labels, buckets=_E2E_BUCKETS, registry=reg)
        self.guard = GuardMetrics(labels, reg)
        reg.register(_EngineCollector(engine, model_name))

    def observe_guard(self, report) -> None:
        """What the tool guard did for one choice (a hearth.tool_guard.GuardReport)."""
        self.guard.observe(self.model_name, report)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def timer(self) -> RequestTimer:
        return RequestTimer(self)


class GuardMetrics:
    """The tool guard's counters (issue 20, point 8)."""

    def __init__(self, labels: list[str], reg: CollectorRegistry):
        self.choices = Counter("hearth:tool_guard_choices", "Choices with tools, by guard mode and outcome.",
                               labels + ["mode", "outcome"], registry=reg)
        self.triggered = Counter("hearth:tool_guard_grammar_triggered", "Choices whose call grammar constrained a call.",
                                 labels, registry=reg)
        self.retries = Counter("hearth:tool_guard_retries", "Retries, by kind and the problem that caused them.",
                               labels + ["kind", "reason"], registry=reg)
        self.coercions = Counter("hearth:tool_guard_coercions", "Safe argument coercions made.", labels, registry=reg)
        self.errors = Counter("hearth:tool_guard_validation_errors", "Problems found in calls (all attempts).",
                              labels, registry=reg)
        self.confidence = Histogram("hearth:tool_guard_call_confidence", "Lowest token probability inside a call.",
                                    labels, buckets=(0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.99, 1.0), registry=reg)

    def observe(self, label: str, report) -> None:
        self.choices.labels(label, report.mode, report.outcome).inc()
        if report.triggered:
            self.triggered.labels(label).inc()
        for r in report.retries:
            self.retries.labels(label, r.kind, r.reason).inc()
        if report.coercions:
            self.coercions.labels(label).inc(len(report.coercions))
        if report.validation_errors:
            self.errors.labels(label).inc(len(report.validation_errors))
        for call in report.calls:
            if call.get("confidence") is not None:
                self.confidence.labels(label).observe(call["confidence"])


class RequestTimer:
    """Follows one engine request's outputs and records its latencies and token counts."""

    def __init__(self, metrics: Metrics):
        self.m, self.label = metrics, metrics.model_name
        self.start = time.perf_counter()
        self.last: float | None = None

    def on_output(self, out) -> None:
        now, n = time.perf_counter(), len(out.new_token_ids)
        m = self.m
        if n:
            if self.last is None:
                m.ttft.labels(self.label).observe(now - self.start)
                m.prompt_tokens.labels(self.label).inc(out.num_prompt_tokens)
            else:
                m.itl.labels(self.label).observe((now - self.last) / n)
            self.last = now
            m.generation_tokens.labels(self.label).inc(n)
        if out.finished:
            m.request_success.labels(self.label, out.finish_reason or "stop").inc()
            m.e2e.labels(self.label).observe(now - self.start)


class _EngineCollector:
    def __init__(self, engine, model_name: str):
        self.engine, self.model_name = engine, model_name

    def collect(self):
        s = self.engine.stats()
        name = [self.model_name]
        for metric, doc, value in (
            ("hearth:num_requests_running", "Requests in the running batch.", s.num_running),
            ("hearth:num_requests_waiting", "Requests waiting to be scheduled.", s.num_waiting),
            ("hearth:kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent.",
             s.kv_blocks_used / s.kv_blocks_total if s.kv_blocks_total else 0.0),
            ("hearth:kv_cache_blocks_used", "KV-cache blocks in use.", s.kv_blocks_used),
            ("hearth:kv_cache_blocks_total", "KV-cache blocks allocated.", s.kv_blocks_total),
        ):
            g = GaugeMetricFamily(metric, doc, labels=["model_name"])
            g.add_metric(name, value)
            yield g
        counters = [
            ("hearth:prefix_cache_queries", "Prefix-cache queries, in tokens.", s.prefix_cache_queries),
            ("hearth:prefix_cache_hits", "Prefix-cache hits, in tokens.", s.prefix_cache_hits),
        ]
        gauges = []
        if s.disk is not None:
            d = s.disk
            counters += [
                ("hearth:prefix_cache_disk_hits", "Prefix-cache hits loaded from the disk tier, in tokens.",
                 s.prefix_cache_disk_hits),
                ("hearth:kv_disk_blocks_read", "KV blocks read back from the disk tier and verified.", d.hits),
                ("hearth:kv_disk_blocks_written", "KV blocks written to the disk tier.", d.writes),
                ("hearth:kv_disk_writes_dropped", "KV block writes dropped: the write queue was full.", d.dropped),
                ("hearth:kv_disk_corrupt_files", "Disk-tier files rejected on read (header, length or "
                 "checksum) and deleted; never loaded.", d.corrupt),
                ("hearth:kv_disk_evictions", "Disk-tier files evicted to stay within the space budget.", d.evictions),
                ("hearth:kv_disk_write_errors", "Disk-tier writes that failed.", d.write_errors),
            ]
            gauges += [("hearth:kv_disk_files", "Block files in the disk tier.", d.files),
                       ("hearth:kv_disk_usage_bytes", "Bytes of block files in the disk tier.", d.bytes)]
        spec = s.spec
        if spec is not None:
            counters += _spec_counters(spec)
        for metric, doc, value in counters:
            c = CounterMetricFamily(metric, doc, labels=["model_name"])
            c.add_metric(name, value)
            yield c
        if spec is not None:
            c = CounterMetricFamily("hearth:spec_decode_num_accepted_tokens_per_pos",
                                    "Accepted draft tokens, by position in the draft.", labels=["model_name", "position"])
            for pos, n in enumerate(spec.accepted_per_pos):
                c.add_metric([self.model_name, str(pos)], n)
            yield c
        for metric, doc, value in gauges:
            g = GaugeMetricFamily(metric, doc, labels=["model_name"])
            g.add_metric(name, value)
            yield g


def _spec_counters(spec) -> list[tuple[str, str, int]]:
    """vLLM's vllm:spec_decode_* counters."""
    return [
        ("hearth:spec_decode_num_drafts", "Sequence-steps that verified draft tokens.", spec.num_drafts),
        ("hearth:spec_decode_num_draft_tokens", "Draft tokens verified.", spec.num_draft_tokens),
        ("hearth:spec_decode_num_accepted_tokens", "Draft tokens accepted.", spec.num_accepted_tokens),
    ]
