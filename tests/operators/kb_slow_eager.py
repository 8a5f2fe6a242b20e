"""KernelBench-style task whose eager forward is slow on purpose (a ReLU
behind a sleep): timing its baselines takes longer than the candidate's
own stages, so a test can see the candidate's time budget leave them out
(tests/python/test_baseline_cache.py)."""
import time

import torch
import torch.nn as nn

SLEEP_S = 0.4


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(SLEEP_S)
        return torch.relu(x)


batch_size = 4
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
