"""Prometheus metrics, named like vLLM's (`vllm:` -> `hearth:`), in a registry per app; every series
carries the served model's id in vLLM's `model_name` label (one server, several models).

Counters and latency histograms are updated as outputs stream out; engine state (running and
waiting requests, KV blocks, prefix-cache counts) is read from each loaded model's
AsyncEngine.stats() at scrape time."""

from __future__ import annotations

import time
from collections.abc import Callable

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
    def __init__(self, loaded: Callable[[], list]):
        """`loaded`: the served models loaded now (name, engine), read at each scrape."""
        disable_created_metrics()  # no `_created` series, as vLLM
        self.registry = CollectorRegistry(auto_describe=True)
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
        self.router = Counter("hearth:router_requests", "Requests a router saw, by its decision (accepted: the "
                              "small model answered; fallback: the main model did after it; skipped: prose needed) "
                              "and the reason.", labels + ["router", "decision", "reason"], registry=reg)
        reg.register(_EngineCollector(loaded))

    def observe_router(self, model_name: str, report) -> None:
        """A hearth.tool_guard.routing.RouterReport; the reason label without its detail."""
        reason = report.reason.split(":", 1)[0]
        self.router.labels(model_name, report.model, report.decision, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def of(self, model_name: str) -> ModelMetrics:
        return ModelMetrics(self, model_name)


class ModelMetrics:
    """The metrics of one served model: what a Generation times its requests with."""

    def __init__(self, metrics: Metrics, model_name: str):
        self.metrics, self.model_name = metrics, model_name

    def timer(self) -> RequestTimer:
        return RequestTimer(self.metrics, self.model_name)

    def observe_guard(self, report) -> None:
        """What the tool guard did for one choice (a hearth.tool_guard.GuardReport)."""
        self.metrics.guard.observe(self.model_name, report)


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
        self.events = Counter("hearth:tool_guard_events", "What the request-side parts did, by kind (rescued, "
                              "compacted, tools_ranked); workflow nudges count as retries of kind nudge.",
                              labels + ["kind"], registry=reg)

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
        for e in report.events:
            self.events.labels(label, e.kind).inc()


class RequestTimer:
    """Follows one engine request's outputs and records its latencies and token counts."""

    def __init__(self, metrics: Metrics, model_name: str):
        self.m, self.label = metrics, model_name
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
    """Engine state at scrape time, a sample per loaded model; an engine with replicas
    (hearth.cluster) gives each replica's series under a `replica` label."""

    def __init__(self, loaded: Callable[[], list]):
        self.loaded = loaded

    def _rows(self) -> tuple[list[str], list[tuple[list[str], object]]]:
        """(label names, [(label values, engine stats)]): a row per loaded model, or per replica."""
        rows: list[tuple[dict[str, str], object]] = []
        for served in self.loaded():
            per_replica = getattr(served.engine, "replica_stats", None)
            if per_replica is None:
                rows.append(({"model_name": served.name}, served.engine.stats()))
            else:
                rows += [({"model_name": served.name, "replica": r}, s) for r, s in per_replica().items()]
        labels = ["model_name"] + (["replica"] if any("replica" in k for k, _ in rows) else [])
        return labels, [([k.get(name, "") for name in labels], s) for k, s in rows]

    def collect(self):
        labels, rows = self._rows()
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for values, s in rows:
            for kind, metric, doc, value in _engine_series(s):
                if metric not in families:
                    families[metric] = kind(metric, doc, labels=labels)
                families[metric].add_metric(values, value)
            if s.spec is not None:
                metric = "hearth:spec_decode_num_accepted_tokens_per_pos"
                if metric not in families:
                    families[metric] = CounterMetricFamily(metric, "Accepted draft tokens, by position in the draft.",
                                                           labels=labels + ["position"])
                for pos, n in enumerate(s.spec.accepted_per_pos):
                    families[metric].add_metric(values + [str(pos)], n)
        yield from families.values()
        yield from _image_series(self.loaded())


_IMAGES = (("hearth:images_prepared", "Images of requests prepared (decoded and resized, or from the cache of "
            "recent ones).", "prepared"),
           ("hearth:images_encoded", "Images (idefics3: tiles) the vision tower encoded.", "encoded"),
           ("hearth:image_encode_seconds", "Seconds the vision tower took.", "encode_seconds"))
"""(name, help, VisionStats field) of the image counters, for models served with an mmproj."""


def _image_series(loaded: list):
    served = [(m.name, m.vision_stats) for m in loaded if getattr(m, "vision_stats", None) is not None]
    if not served:
        return
    for metric, doc, attr in _IMAGES:
        family = CounterMetricFamily(metric, doc, labels=["model_name"])
        for name, stats in served:
            family.add_metric([name], getattr(stats, attr))
        yield family


def _engine_series(s) -> list[tuple[type, str, str, float]]:
    """(family class, name, help, value) of one engine's state."""
    G, C = GaugeMetricFamily, CounterMetricFamily
    out = [
        (G, "hearth:num_requests_running", "Requests in the running batch.", s.num_running),
        (G, "hearth:num_requests_waiting", "Requests waiting to be scheduled.", s.num_waiting),
        (G, "hearth:kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent.",
         s.kv_blocks_used / s.kv_blocks_total if s.kv_blocks_total else 0.0),
        (G, "hearth:kv_cache_blocks_used", "KV-cache blocks in use.", s.kv_blocks_used),
        (G, "hearth:kv_cache_blocks_total", "KV-cache blocks allocated.", s.kv_blocks_total),
        (C, "hearth:prefix_cache_queries", "Prefix-cache queries, in tokens.", s.prefix_cache_queries),
        (C, "hearth:prefix_cache_hits", "Prefix-cache hits, in tokens.", s.prefix_cache_hits),
        (C, "hearth:num_preemptions", "Requests the scheduler preempted for KV-cache room (recomputed later).",
         s.num_preemptions),
    ]
    if s.disk is not None:
        d = s.disk
        out += [
            (C, "hearth:prefix_cache_disk_hits", "Prefix-cache hits loaded from the disk tier, in tokens.",
             s.prefix_cache_disk_hits),
            (C, "hearth:kv_disk_blocks_read", "KV blocks read back from the disk tier and verified.", d.hits),
            (C, "hearth:kv_disk_blocks_written", "KV blocks written to the disk tier.", d.writes),
            (C, "hearth:kv_disk_writes_dropped", "KV block writes dropped: the write queue was full.", d.dropped),
            (C, "hearth:kv_disk_corrupt_files", "Disk-tier files rejected on read (header, length or "
             "checksum) and deleted; never loaded.", d.corrupt),
            (C, "hearth:kv_disk_evictions", "Disk-tier files evicted to stay within the space budget.", d.evictions),
            (C, "hearth:kv_disk_write_errors", "Disk-tier writes that failed.", d.write_errors),
            (G, "hearth:kv_disk_files", "Block files in the disk tier.", d.files),
            (G, "hearth:kv_disk_usage_bytes", "Bytes of block files in the disk tier.", d.bytes),
        ]
    if s.spec is not None:
        out += [(C, *c) for c in _spec_counters(s.spec)]
    return out


def _spec_counters(spec) -> list[tuple[str, str, int]]:
    """vLLM's vllm:spec_decode_* counters, then hearth's policy's decisions (why drafts were few)."""
    return [
        ("hearth:spec_decode_num_drafts", "Sequence-steps that verified draft tokens.", spec.num_drafts),
        ("hearth:spec_decode_num_draft_tokens", "Draft tokens verified.", spec.num_draft_tokens),
        ("hearth:spec_decode_num_accepted_tokens", "Draft tokens accepted.", spec.num_accepted_tokens),
        ("hearth:spec_decode_policy_steps", "Steps with a request decoding its next token.", spec.num_steps),
        ("hearth:spec_decode_policy_steps_drafting", "Of them, steps that offered drafts.", spec.num_steps_drafting),
        ("hearth:spec_decode_policy_steps_batch_off",
         "Of them, steps without drafts: the batch at disable_by_batch_size or more.", spec.num_steps_batch_off),
        ("hearth:spec_decode_policy_paused",
         "Request-steps without drafts: the policy paused the request, for either reason below (their sum).",
         spec.num_paused),
        ("hearth:spec_decode_policy_paused_failing",
         "Of them, pauses because the request's drafts kept failing (rejected several steps in a row).",
         spec.num_paused_failing),
        ("hearth:spec_decode_policy_paused_not_paying",
         "Of them, pauses because the cost model priced the request's drafts as not paying on this machine "
         "(a draft step costs more than the tokens its acceptance would gain).", spec.num_paused_not_paying),
    ]
