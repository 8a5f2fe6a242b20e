"""robust-kbench analysis test task: softmax of x / temperature, with the
temperature a positional scalar and the dim a keyword scalar."""
import torch
import torch.nn as nn


def forward_fn(x: torch.Tensor, temperature: float, dim: int = 1) -> torch.Tensor:
    return torch.softmax(x / temperature, dim=dim)


class Model(nn.Module):
    def __init__(self, temperature: float = 2.0):
        super().__init__()
        self.temperature = temperature

    def forward(self, x, fn=forward_fn):
        return fn(x, self.temperature, dim=-1)


def get_inputs(batch_size: int = 8, dim: int = 40):
    return [torch.randn(batch_size, dim)]


input_names = ["x"]
