"""Layer normalisation over the last dimension, with its affine weight and bias (a krung
test problem in KernelBench's format). The defaults (weight ones, bias zeros) would let a
version that ignores them pass; krung draws new values."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * weight + bias, over the last dimension."""

    def __init__(self, features: int):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


rows = 12
features = 200


def get_inputs():
    return [torch.randn(rows, features) * 2 + 0.5]


def get_init_inputs():
    return [features]
