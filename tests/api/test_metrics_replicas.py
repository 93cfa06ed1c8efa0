"""/metrics' engine series: one engine's under `model_name`; an engine with replicas (a cluster's
front end) gives each replica's series under a `replica` label, disk and spec-decode series too."""

from __future__ import annotations

from types import SimpleNamespace

from hearth.api.metrics import Metrics
from hearth.engine.async_engine import EngineStats
from hearth.kvstore.disk import DiskStats
from hearth.spec_decode.policy import SpecDecodeStats


def stats(hits: int, disk: bool = False, spec: bool = False) -> EngineStats:
    return EngineStats(1, 0, 3, 10, 100, hits, 16 if disk else 0, DiskStats(hits=2, files=5) if disk else None,
                       SpecDecodeStats(num_drafts=4, accepted_per_pos=[3, 1]) if spec else None)


class One:
    def stats(self):
        return stats(40, disk=True)


class Replicas:
    def stats(self):
        raise AssertionError("a cluster's scrape reads replica_stats")

    def replica_stats(self):
        return {"r0": stats(40, spec=True), "r1": stats(7, disk=True)}


def lines(engine) -> set[str]:
    served = SimpleNamespace(name="m", engine=engine)
    return set(Metrics(lambda: [served]).render().decode().splitlines())


def test_one_engine_has_no_replica_label():
    out = lines(One())
    assert 'hearth:prefix_cache_hits_total{model_name="m"} 40.0' in out
    assert 'hearth:kv_disk_files{model_name="m"} 5.0' in out
    assert 'hearth:kv_cache_usage_perc{model_name="m"} 0.3' in out
    assert not any("replica=" in line for line in out)


def test_replicas_each_under_their_label():
    out = lines(Replicas())
    assert 'hearth:prefix_cache_hits_total{model_name="m",replica="r0"} 40.0' in out
    assert 'hearth:prefix_cache_hits_total{model_name="m",replica="r1"} 7.0' in out
    assert 'hearth:num_requests_running{model_name="m",replica="r1"} 1.0' in out
    assert 'hearth:kv_disk_blocks_read_total{model_name="m",replica="r1"} 2.0' in out
    assert 'hearth:spec_decode_num_drafts_total{model_name="m",replica="r0"} 4.0' in out
    assert 'hearth:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1",replica="r0"} 1.0' in out


def test_a_model_beside_a_cluster_gets_an_empty_replica_label():
    """Every family keeps one label set: with one model on replicas, the others' series say replica=""."""
    out = set(Metrics(lambda: [SimpleNamespace(name="c", engine=Replicas()), SimpleNamespace(name="m", engine=One())])
              .render().decode().splitlines())
    assert 'hearth:prefix_cache_hits_total{model_name="c",replica="r1"} 7.0' in out
    assert 'hearth:prefix_cache_hits_total{model_name="m",replica=""} 40.0' in out
