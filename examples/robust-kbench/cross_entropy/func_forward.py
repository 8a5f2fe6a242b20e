"""robust-kbench task: cross-entropy loss over a vocabulary (family:
rowwise, kind cross_entropy).

The same function as examples/kernelbench/cross_entropy.py.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the rows of logits against targets.

    Args:
        logits: shape (batch_size, vocab_size)
        targets: int64 class indices, shape (batch_size,)

    Returns:
        a 0-d tensor: mean over rows of logsumexp(row) - row[target]
    """
    return F.cross_entropy(logits, targets, reduction="mean")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets, fn=forward_fn):
        return fn(logits, targets)


def get_inputs(batch_size: int = 1024, vocab_size: int = 32768):
    logits = torch.randn(batch_size, vocab_size)
    targets = torch.randint(0, vocab_size, (batch_size,), dtype=torch.int64)
    return [logits, targets]


input_names = ["logits", "targets"]
