"""Bytes of the KV cache per token, per layer, for every KV format hearth has or plans
(`--kv-cache-dtype`): the records and their cost model live in hearth.formats.kv; the planner reads
them from here."""

from hearth.formats.kv import (ALIASES, F16_BYTES, KV_FORMATS, Cost, GGMLBlocks, KVFormat, PerChannel,  # noqa: F401
                               PerToken, Plain, SERVED_KV, ScalePerBlock, kv_format,
                               served_kv_format)
