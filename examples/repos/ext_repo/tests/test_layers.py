import pytest
import torch

from extpkg.layers import ScaledTanh

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_soft_clip_formula(device):
    x = torch.randn(64, 512, device=device)
    torch.testing.assert_close(ScaledTanh()(x), torch.tanh(x * 0.75) * 1.5)


def test_soft_clip_bounds():
    assert ScaledTanh()(torch.randn(64, 512) * 100).abs().max().item() <= 1.5
