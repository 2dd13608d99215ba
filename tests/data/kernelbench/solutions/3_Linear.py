"""The linear layer as one addmm, keeping Model's parameter names so krung can load them."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.linear.bias, x, self.linear.weight.t())
