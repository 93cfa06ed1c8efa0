"""On this machine, `hearth plan`'s predicted memory is within 10% of what a real hearth process
holds while it serves: a fresh python loads the model with `LLM`, resets its peak-RSS mark (so the
transient peak of loading, which the plan does not model, is left out), runs a batch that fills the
planned context of every sequence, and reports its peak resident set (VmHWM): runtime libraries,
weights, tokenizer, every KV block touched, and the step's activations."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hearth.config import EngineConfig
from hearth.memory.devices import get_device
from hearth.memory.kv_formats import kv_format
from hearth.memory.model_input import from_gguf
from hearth.memory.planner import PlanRequest, plan
from hearth.memory.this_machine import this_device

ROOT = Path(__file__).resolve().parents[2]
CTX, SEQS, NEW_TOKENS = 512, 2, 16
TOLERANCE = 0.10

# prompts of CTX - NEW_TOKENS ids, so prefill and decode touch every KV block the plan reserves
PROBE = r"""
import json, sys
from hearth import LLM, SamplingParams
path, ctx, seqs, new = sys.argv[1], *map(int, sys.argv[2:5])
llm = LLM(path, max_model_len=ctx, max_num_seqs=seqs, progress=False)
open("/proc/self/clear_refs", "w").write("5")  # VmHWM := VmRSS: measure the serving peak from here
prompts = [{"prompt_token_ids": [(i * 7919 + s * 104729) % 5000 + 100 for i in range(ctx - new)]} for s in range(seqs)]
out = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=new, ignore_eos=True))
assert all(len(o.outputs[0].token_ids) == new for o in out)
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({k: int(status[k].split()[0]) * 1024 for k in ("VmHWM", "VmRSS", "RssAnon", "RssFile")}))
"""


def measure(path: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(path), str(CTX), str(SEQS), str(NEW_TOKENS)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_predicted_resident_memory_within_10_percent(real_gguf, plan_home, name):
    g = real_gguf(name)
    m = from_gguf(g)
    cfg = EngineConfig()
    p = plan(PlanRequest(m.shape, m.tensors, m.weights_source, this_device(plan_home), CTX, SEQS,
                         kv_format("f16"), cfg.block_size, cfg.max_num_batched_tokens))
    measured = measure(g.path)
    predicted = p["total_bytes"]
    breakdown = {k: round(p[k] / 2**20, 1) for k in ("resident_weight_bytes", "kv_cache_bytes", "activation_bytes",
                                                     "runtime_bytes", "tokenizer_bytes", "total_bytes")}
    assert abs(predicted - measured["VmHWM"]) <= TOLERANCE * measured["VmHWM"], (
        f"{name}: predicted {predicted / 2**20:.1f} MiB {breakdown}, measured "
        f"{ {k: round(v / 2**20, 1) for k, v in measured.items()} } MiB")


@pytest.mark.parametrize("name,ctx,seqs", [("smollm2-135m", 8192, 3), ("gemma3-270m", 2048, 4)])
def test_kv_reservation_equals_the_engines(real_gguf, name, ctx, seqs):
    """The KV bytes the plan reserves are the bytes hearth's allocator (hearth.memory.kv_cache.pool_blocks over
    the KV codec's bytes) sets aside. (gemma3 past its 512 window: the pool's blocks hold its sliding layers
    too. Quantized formats: tests/memory/test_plan_vs_engine.py.)"""
    from hearth.kvstore.codecs import CODECS
    from hearth.memory.kv_cache import pool_blocks
    from hearth.models.registry import model_class

    g = real_gguf(name)
    m, mc = from_gguf(g), model_class(g.arch).config_from_gguf(g)
    cfg = EngineConfig(max_num_seqs=seqs, kv_cache_memory_gb=64)
    for codec in CODECS.values():
        block_bytes = mc.num_layers * codec.block_bytes(cfg.block_size, mc.num_kv_heads, mc.head_dim)
        engine_bytes = pool_blocks(block_bytes, 0, cfg.block_size, seqs, ctx, cfg.kv_cache_memory_gb) * block_bytes
        p = plan(PlanRequest(m.shape, m.tensors, m.weights_source, get_device("H200"), ctx, seqs,
                             codec.format, cfg.block_size, cfg.max_num_batched_tokens))
        assert p["kv_cache_bytes"] == engine_bytes, codec.name
