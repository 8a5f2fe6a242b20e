from torch import nn

from tinymlp.act import GeluTanh


class TinyMLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.act = GeluTanh(0.5)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.down(self.act(self.up(x)))
