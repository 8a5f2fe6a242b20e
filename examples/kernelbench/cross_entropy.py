"""Cross-entropy loss over a vocabulary (family: rowwise, kind
cross_entropy).

logits (batch_size, vocab_size) and int64 targets (batch_size,); the mean
over rows of logsumexp(row) - row[target]. The output is a 0-d tensor. The
size is named vocab_size (not num_classes) so that the harness scales it:
a kernel must not assume one vocabulary.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """F.cross_entropy(logits, targets), mean reduction."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets, reduction="mean")


batch_size = 1024
vocab_size = 32768


def get_inputs():
    logits = torch.randn(batch_size, vocab_size)
    targets = torch.randint(0, vocab_size, (batch_size,), dtype=torch.int64)
    return [logits, targets]


def get_init_inputs():
    return []
