import pytest
import torch
import torch.nn.functional as F

from tinymlp import GeluTanh, TinyMLP

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_act_matches_formula(device):
    x = torch.randn(64, 256, device=device)
    torch.testing.assert_close(GeluTanh(0.5)(x), torch.tanh(F.gelu(x * 0.5)))


def test_act_is_bounded():
    y = GeluTanh(0.5)(torch.randn(64, 256) * 100)
    assert y.abs().max().item() <= 1.0


def test_mlp_trains():
    torch.manual_seed(0)
    m = TinyMLP(32, 256)
    x = torch.randn(64, 32)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    first = None
    for _ in range(20):
        loss = (m(x) - x).pow(2).mean()
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first
