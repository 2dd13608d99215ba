"""ReLU over a batch of vectors (a krung test problem in KernelBench's format)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = max(x, 0), elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 16
dim = 1000


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
