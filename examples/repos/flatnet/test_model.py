import pytest
import torch

from model import Net, SiluGate
from train import train

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_gate_formula(device):
    x = torch.randn(128, 256, device=device)
    torch.testing.assert_close(SiluGate()(x), x * torch.sigmoid(x) * 0.5 + 0.1)


def test_training_lowers_the_loss():
    losses = train(steps=30)
    assert losses[-1] < losses[0]


def test_net_shape():
    assert Net()(torch.randn(8, 64)).shape == (8, 10)
