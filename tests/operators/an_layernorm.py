"""Analysis test operator: nn.LayerNorm over the last dim of a 3-d input."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-6)

    def forward(self, x):
        return self.ln(x)


batch_size = 2
seq_len = 5
hidden = 48


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
