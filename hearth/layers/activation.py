"""The MLP activations by the name an ArchSpec gives (act(gate) * up): torch's, the reference the C++
kernels' act_ps is held to."""

import torch.nn.functional as F

ACTIVATIONS = {
    "silu": F.silu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}
