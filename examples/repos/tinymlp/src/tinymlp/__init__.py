from tinymlp.act import GeluTanh
from tinymlp.mlp import TinyMLP

__all__ = ["GeluTanh", "TinyMLP"]
