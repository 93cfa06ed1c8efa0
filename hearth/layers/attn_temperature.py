"""Llama 4-style attention temperature (mistral3: Ministral 3): each query, after its rope, times
1 + beta * ln(1 + floor(pos / floor_scale)): 1 within the original context, one step larger each further
original context, so that attention stays sharp far past it. As llama.cpp's llm_graph_input_attn_temp
(f_attn_temp_scale, n_attn_temp_floor_scale = the file's original YaRN context) and transformers'
get_llama_4_attn_scale; the keys are not scaled, so the cache holds plain K."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class AttnTemperature:
    beta: float
    floor_scale: int

    def factors(self, positions: torch.Tensor, memo: dict) -> torch.Tensor:
        """positions [T] -> [T] f32 (memo: the step's, AttentionMetadata.memo.temperature, shared by the layers)."""
        key = (self.beta, self.floor_scale)
        if key not in memo:
            steps = torch.floor(positions.to(torch.float32) / self.floor_scale)
            memo[key] = torch.log1p(steps).mul_(self.beta).add_(1.0)
        return memo[key]

    def scale_(self, q: torch.Tensor, positions: torch.Tensor, memo: dict) -> None:
        """q [T, heads, head_dim], scaled in place."""
        q.mul_(self.factors(positions, memo)[:, None, None].to(q.device, q.dtype))
