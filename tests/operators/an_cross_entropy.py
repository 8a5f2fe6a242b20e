"""Analysis test operator: nn.CrossEntropyLoss with integer targets."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = nn.CrossEntropyLoss(reduction="sum")

    def forward(self, logits, targets):
        return self.loss(logits, targets)


batch_size = 8
vocab_size = 50


def get_inputs():
    return [torch.randn(batch_size, vocab_size),
            torch.randint(0, vocab_size, (batch_size,))]


def get_init_inputs():
    return []
