"""The MLP activations by the name an ArchSpec gives (act(gate) * up): torch's, the reference the C++
kernels' act_ps is held to; and the gated units of routed experts, some of which are no act(gate) * up."""

import torch
import torch.nn.functional as F

ACTIVATIONS = {
    "silu": F.silu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}

SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0
"""gpt-oss's clamped SwiGLU (its reference's constants; llama.cpp's swiglu_oai hard-codes them too)."""


def _swiglu_oai(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit); into gate's memory."""
    gate = gate.clamp_(max=SWIGLU_LIMIT)
    return torch.sigmoid(gate * SWIGLU_ALPHA).mul_(gate).mul_(up.clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT).add_(1))


GLUS = {
    **{name: (lambda act: lambda gate, up: act(gate).mul_(up))(act) for name, act in ACTIVATIONS.items()},
    "swiglu_oai": _swiglu_oai,
}
"""name -> glu(gate, up) [rows, ffn] each -> [rows, ffn] (into gate's memory): an expert's gated unit."""
